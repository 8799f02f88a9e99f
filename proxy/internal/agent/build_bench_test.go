package agent

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
	"coxswain.dev/coxswain/proxy/internal/resource"
)

// BenchmarkBuildDelta merges a one-route delta into a set of 10,000 routes and checks the
// merged set against the snapshot's version, what the agent does before the data plane
// applies a delta.
func BenchmarkBuildDelta(b *testing.B) {
	big := snaptest.HTTP("bench/gw", 80, snaptest.VHost("http", "", snaptest.ScaleRoutes(10000, "bench/app:80")...))
	base := snaptest.Resources(b, big, snaptest.Cluster(b, "bench/app:80", "127.0.0.1:18080"))
	changed := proto.CloneOf(big)
	changed.VirtualHosts[0].Routes[5000].Match = snaptest.Prefix("/changed")
	delta := snaptest.Resources(b, changed)
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
	snap := &discoveryv1.Snapshot{Version: version(append(delta, base[1])), Resources: delta}
	a := &Agent{applied: applied}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := a.build(snap); err != nil {
			b.Fatal(err)
		}
	}
}
