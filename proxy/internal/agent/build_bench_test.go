package agent

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/routeset"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
	"coxswain.dev/coxswain/proxy/internal/resource"
)

// BenchmarkBuildDelta merges a one-route delta into a set of 10,000 routes and checks the
// merged set against the snapshot's version, what the agent does before the data plane
// applies a delta: with the listener's routes inside it (the delta is the whole listener), and
// in route sets (the delta is the set that holds the route). The agent holds the applied set's
// hash, as it does after its first apply.
func BenchmarkBuildDelta(b *testing.B) {
	big := snaptest.HTTP("bench/gw", 80, snaptest.VHost("http", "", snaptest.ScaleRoutes(10000, "bench/app:80")...))
	changed := proto.CloneOf(big)
	changed.VirtualHosts[0].Routes[5000].Match = snaptest.Prefix("/changed")
	cluster := snaptest.Resources(b, snaptest.Cluster(b, "bench/app:80", "127.0.0.1:18080"))
	b.Run("inline", func(b *testing.B) {
		benchBuildDelta(b, append(snaptest.Resources(b, big), cluster...), snaptest.Resources(b, changed))
	})
	b.Run("route-sets", func(b *testing.B) {
		base, after := splitResources(b, big), splitResources(b, changed)
		var delta []*discoveryv1.Resource
		for i, r := range after {
			if !proto.Equal(r, base[i]) {
				delta = append(delta, r)
			}
		}
		benchBuildDelta(b, append(base, cluster...), delta)
	})
}

// splitResources returns the resources of a listener with its routes in route sets.
func splitResources(b *testing.B, l *discoveryv1.Listener) []*discoveryv1.Resource {
	head, sets := routeset.Split(l)
	out := []*discoveryv1.Resource{resourceOf(b, routeset.ListenerKeyPrefix+l.GetName(), head)}
	for _, s := range sets {
		out = append(out, resourceOf(b, routeset.Key(s.GetListener(), s.GetVirtualHost(), s.GetHostname()), s))
	}
	return out
}

func resourceOf(b *testing.B, key string, m proto.Message) *discoveryv1.Resource {
	r, err := cache.NewResource(key, m)
	if err != nil {
		b.Fatal(err)
	}
	return r
}

func benchBuildDelta(b *testing.B, base, delta []*discoveryv1.Resource) {
	version := func(rs []*discoveryv1.Resource) string {
		s, err := cache.NewSnapshot(rs, time.Time{})
		if err != nil {
			b.Fatal(err)
		}
		return s.Version()
	}
	applied, err := resource.NewSet(version(base), base)
	if err != nil {
		b.Fatal(err)
	}
	merged, err := applied.Merge("merged", delta, nil)
	if err != nil {
		b.Fatal(err)
	}
	snap := &discoveryv1.Snapshot{Version: version(merged.Resources()), Resources: delta}
	hashed, err := verifyVersion(applied, nil)
	if err != nil {
		b.Fatal(err)
	}
	a := &Agent{applied: applied, hashed: hashed}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := a.build(snap); err != nil {
			b.Fatal(err)
		}
	}
}
