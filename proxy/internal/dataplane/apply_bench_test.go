package dataplane_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/go-logr/logr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/routeset"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
	"coxswain.dev/coxswain/proxy/internal/resource"
)

// BenchmarkApply applies snapshots of 10,000 routes that differ in every route (each names
// another cluster) to a running data plane: validation, compilation of every route, cluster
// set-up and the swap. It reports the heap the data plane holds with the table loaded
// (MiB-held) besides the time per apply.
func BenchmarkApply(b *testing.B) {
	const routes = 10000
	sets := make([]*resource.Set, 2)
	for i := range sets {
		cluster := fmt.Sprintf("bench/app-%d:80", i)
		res := snaptest.Resources(b,
			snaptest.HTTP("bench/gw", 80, snaptest.VHost("http", "", snaptest.ScaleRoutes(routes, cluster)...)),
			snaptest.Cluster(b, cluster, "127.0.0.1:18080"))
		s, err := resource.NewSet(fmt.Sprintf("v%d", i), res)
		if err != nil {
			b.Fatal(err)
		}
		sets[i] = s
	}
	before := heap()
	d := benchDataPlane(b, sets[0])
	held := heap() - before
	alternate(b, d, sets)
	b.ReportMetric(float64(held)/(1<<20), "MiB-held")
}

// BenchmarkApplyDelta applies one-resource deltas, merged as the agent merges them, to a data
// plane serving 10,000 routes in one virtual host over 100 clusters of two endpoints, and an
// HTTPS listener: each apply changes one route's path, one cluster's endpoints, or one
// certificate, and the next changes it back.
func BenchmarkApplyDelta(b *testing.B) {
	const routes, clusters = 10000, 100
	rs := snaptest.ScaleRoutes(routes, "")
	for i, r := range rs {
		r.Backends[0].Cluster = fmt.Sprintf("bench/app-%d:80", i%clusters)
	}
	big := snaptest.HTTP("bench/gw", 80, snaptest.VHost("http", "", rs...))
	cert, _ := snaptest.Certificate(b, "bench/cert", "secure.example.com")
	msgs := []proto.Message{
		big, cert,
		snaptest.Listener("bench/tls", 443, discoveryv1.Protocol_PROTOCOL_HTTPS, &discoveryv1.VirtualHost{
			Name: "https", Hostname: "secure.example.com", Certificates: []string{"bench/cert"},
			Routes: snaptest.ScaleRoutes(10, "bench/app-0:80"),
		}),
	}
	for i := range clusters {
		msgs = append(msgs, snaptest.Cluster(b, fmt.Sprintf("bench/app-%d:80", i), "127.0.0.1:18080", fmt.Sprintf("127.0.0.%d:18080", 2+i)))
	}
	base := snaptest.Set(b, "base", msgs...)
	route := proto.CloneOf(big)
	route.VirtualHosts[0].Routes[routes/2].Match = snaptest.Prefix("/changed")
	otherCert, _ := snaptest.Certificate(b, "bench/cert", "secure.example.com")
	for _, delta := range []struct {
		name string
		msg  proto.Message
	}{
		{"route", route},
		{"cluster", snaptest.Cluster(b, "bench/app-7:80", "127.0.0.1:18081", "127.0.0.1:18082")},
		{"certificate", otherCert},
	} {
		b.Run(delta.name, func(b *testing.B) {
			changed, err := base.Merge("changed", snaptest.Resources(b, delta.msg), nil)
			if err != nil {
				b.Fatal(err)
			}
			d := benchDataPlane(b, base)
			alternate(b, d, []*resource.Set{base, changed})
		})
	}
	// The same route change with the listener's routes in route sets, as the controller sends
	// them: the delta is the one set that holds the route.
	b.Run("route-in-route-sets", func(b *testing.B) {
		split := func(l *discoveryv1.Listener) []*discoveryv1.Resource {
			head, sets := routeset.Split(l)
			out := snaptest.Resources(b, head)
			for _, s := range sets {
				a, err := anypb.New(s)
				if err != nil {
					b.Fatal(err)
				}
				out = append(out, &discoveryv1.Resource{Key: routeset.Key(s.GetListener(), s.GetVirtualHost(), s.GetHostname()), Payload: a})
			}
			return out
		}
		base, err := resource.NewSet("base", append(split(big), snaptest.Resources(b, msgs[1:]...)...))
		if err != nil {
			b.Fatal(err)
		}
		var delta []*discoveryv1.Resource
		before := map[string]*anypb.Any{}
		for _, r := range split(big) {
			before[r.GetKey()] = r.GetPayload()
		}
		for _, r := range split(route) {
			if !proto.Equal(before[r.GetKey()], r.GetPayload()) {
				delta = append(delta, r)
			}
		}
		if len(delta) != 1 {
			b.Fatalf("the route change touches %d resources, want one set", len(delta))
		}
		changed, err := base.Merge("changed", delta, nil)
		if err != nil {
			b.Fatal(err)
		}
		d := benchDataPlane(b, base)
		alternate(b, d, []*resource.Set{base, changed})
	})
}

func benchDataPlane(b *testing.B, first *resource.Set) *dataplane.DataPlane {
	b.Helper()
	d, err := dataplane.New(logr.Discard(), withEngine(dataplane.Options{Listener: listenOn127()}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Shutdown(context.Background()) })
	if err := d.Apply(context.Background(), first); err != nil {
		b.Fatal(err)
	}
	return d
}

// alternate applies sets[1], sets[0], sets[1] ... to d, which serves sets[0].
func alternate(b *testing.B, d *dataplane.DataPlane, sets []*resource.Set) {
	b.Helper()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if err := d.Apply(context.Background(), sets[i%2]); err != nil {
			b.Fatal(err)
		}
	}
}

func heap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
