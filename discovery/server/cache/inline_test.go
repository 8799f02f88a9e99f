package cache_test

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/routeset"
	"coxswain.dev/coxswain/discovery/server/cache"
)

// Tests that a snapshot without route sets is its own inline layout, whatever its size, and that
// one with route sets has an inline layout made once: its listeners assembled, its other
// resources shared, and the version of those resources; but none when its encoding is larger
// than the bound.
func TestInline(t *testing.T) {
	t.Parallel()
	other, err := cache.NewResource("cluster/ns/svc:80", wrapperspb.String("endpoints"))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := cache.NewSnapshot([]*discoveryv1.Resource{other}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if in, err := plain.Inline(cache.DefaultMaxInlineBytes); err != nil || in != plain {
		t.Errorf("a snapshot without route sets: inline %p %v, want itself", in, err)
	}

	l := &discoveryv1.Listener{Name: "ns/gw/80", VirtualHosts: []*discoveryv1.VirtualHost{{Name: "http", Routes: []*discoveryv1.Route{{Name: "r", Hostname: "a.example.com"}}}}}
	head, sets := routeset.Split(l)
	lr, err := cache.NewResource(routeset.ListenerKeyPrefix+l.GetName(), head)
	if err != nil {
		t.Fatal(err)
	}
	sr, err := cache.NewResource(routeset.Key(l.GetName(), "http", "a.example.com"), sets[0])
	if err != nil {
		t.Fatal(err)
	}
	res := []*discoveryv1.Resource{other, lr, sr}
	snap, err := cache.NewSnapshot(res, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if in, err := snap.Inline(snap.EncodedSize() - 1); !errors.Is(err, cache.ErrInlineTooLarge) || in != nil {
		t.Fatalf("inline layout of a snapshot over the bound: %p %v, want ErrInlineTooLarge", in, err)
	}
	if in, err := plain.Inline(0); err != nil || in != plain {
		t.Errorf("a snapshot without route sets over the bound: inline %p %v, want itself", in, err)
	}
	in, err := snap.Inline(snap.EncodedSize())
	if err != nil {
		t.Fatal(err)
	}
	again, _ := snap.Inline(cache.DefaultMaxInlineBytes)
	if in == snap || again != in {
		t.Fatalf("inline layout %p, again %p, snapshot %p: want one layout of its own", in, again, snap)
	}
	got := in.Resources()
	if len(got) != 2 || got[0] != other || got[1].GetKey() != routeset.ListenerKeyPrefix+l.GetName() {
		t.Fatalf("inline resources %v", got)
	}
	want, err := cache.NewSnapshot(got, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if in.Version() != want.Version() || in.Version() == snap.Version() {
		t.Errorf("inline version %s, want %s, which is not the snapshot's %s", in.Version(), want.Version(), snap.Version())
	}
}
