package dataplane_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
	"coxswain.dev/coxswain/proxy/internal/resource"
)

// Tests that deltas merged as the agent merges them take effect on the next request: a route
// changed in a large virtual host, and a cluster's endpoints moved to another backend; and
// that a refused delta leaves the last good table serving, routes and endpoints alike.
func TestApplyDeltas(t *testing.T) {
	t.Parallel()
	a, _ := backend(t, "a")
	b, _ := backend(t, "b")
	d := start(t, dataplane.Options{})
	routes := snaptest.ScaleRoutes(1000, "ns/app:80")
	big := snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "", routes...))
	set := snaptest.Set(t, "v0", big, snaptest.Cluster(t, "ns/app:80", hostPort(a)))
	mustApply(t, d, set)
	c := client(addr(t, d, 80))
	host, path := snaptest.ScaleTarget(500)
	get := func(host, path string) response { return do(t, c, "GET", "http://"+host+path, "Host: "+host) }
	if r := get(host, path); r.status != 200 || r.echo.Backend != "a" {
		t.Fatalf("before any delta: %d from %q", r.status, r.echo.Backend)
	}

	changed := proto.CloneOf(big)
	changed.VirtualHosts[0].Routes[500].Match = snaptest.Prefix("/moved")
	set = merge(t, set, "v1", changed)
	mustApply(t, d, set)
	if r := get(host, "/moved"); r.status != 200 {
		t.Errorf("the changed route: %d", r.status)
	}
	if r := get(host, path); r.status != 404 {
		t.Errorf("the path the changed route left: %d, want 404", r.status)
	}

	set = merge(t, set, "v2", snaptest.Cluster(t, "ns/app:80", hostPort(b)))
	mustApply(t, d, set)
	if r := get(host, "/moved"); r.echo.Backend != "b" {
		t.Errorf("after the endpoints moved: %d from %q, want b", r.status, r.echo.Backend)
	}

	bad := proto.CloneOf(changed)
	bad.VirtualHosts[0].Routes[10].Match = snaptest.Regex("/(")
	refused := merge(t, set, "v3", bad, snaptest.Cluster(t, "ns/app:80", hostPort(a)))
	if err := d.Apply(context.Background(), refused); !errors.Is(err, router.ErrInvalid) {
		t.Fatalf("a delta with an invalid route: got %v, want ErrInvalid", err)
	}
	if r := get(host, "/moved"); r.echo.Backend != "b" {
		t.Errorf("after the refused delta: %d from %q, want b", r.status, r.echo.Backend)
	}
	host10, path10 := snaptest.ScaleTarget(10)
	if r := get(host10, path10); r.status != 200 {
		t.Errorf("the route the refused delta broke: %d", r.status)
	}
}

func mustApply(t *testing.T, d *dataplane.DataPlane, set *resource.Set) {
	t.Helper()
	if err := d.Apply(context.Background(), set); err != nil {
		t.Fatalf("apply %s: %v", set.Version(), err)
	}
}

func merge(t *testing.T, set *resource.Set, version string, msgs ...proto.Message) *resource.Set {
	t.Helper()
	out, err := set.Merge(version, snaptest.Resources(t, msgs...), nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
