package upstream

import (
	"maps"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

func update(t *testing.T, prev *router.Table, msgs ...proto.Message) *router.Table {
	t.Helper()
	table, err := router.Update(prev, snaptest.Seq(snaptest.Resources(t, msgs...)))
	if err != nil {
		t.Fatal(err)
	}
	return table
}

// Tests that a set built from a derived table shares the clusters that did not change, with
// their round-robin position, and that retiring the previous set forgets exactly the endpoints
// no cluster holds any more.
func TestBuildSharesUnchangedClusters(t *testing.T) {
	t.Parallel()
	a := snaptest.Cluster(t, "ns/a:80", "10.0.0.1:80", "10.0.0.2:80")
	b := snaptest.Cluster(t, "ns/b:80", "10.0.0.3:80", "10.0.0.1:80")
	c := snaptest.Cluster(t, "ns/c:80", "10.0.0.4:80")
	p := NewPool(Options{})
	t1 := update(t, nil, a, b, c)
	s1 := p.Build(nil, t1)
	p.Retire(nil, s1)
	if got := s1.Cluster(0).Next().Address; got != "10.0.0.1:80" {
		t.Fatalf("first pick %s", got)
	}

	t2 := update(t, t1, a, snaptest.Cluster(t, "ns/b:80", "10.0.0.5:80")) // b changes, c goes
	s2 := p.Build(s1, t2)
	p.Retire(s1, s2)
	if s2.Cluster(0) != s1.Cluster(0) {
		t.Error("the unchanged cluster was built again")
	}
	if got := s2.Cluster(0).Next().Address; got != "10.0.0.2:80" {
		t.Errorf("the unchanged cluster lost its round-robin position: picked %s", got)
	}
	if s2.Cluster(1) == s1.Cluster(1) || s2.Cluster(1).Next().Address != "10.0.0.5:80" {
		t.Error("the changed cluster kept its old endpoints")
	}
	want := []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.5:80"}
	if got := slices.Sorted(maps.Keys(p.clients)); !slices.Equal(got, want) {
		t.Errorf("endpoints held %v, want %v", got, want)
	}

	t3 := update(t, t2, snaptest.Cluster(t, "ns/b:80", "10.0.0.5:80")) // a goes
	s3 := p.Build(s2, t3)
	p.Retire(s2, s3)
	if got := slices.Sorted(maps.Keys(p.clients)); !slices.Equal(got, []string{"10.0.0.5:80"}) {
		t.Errorf("endpoints held %v after a left", got)
	}
}
