package dataplane_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/go-logr/logr"

	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
	"coxswain.dev/coxswain/proxy/internal/resource"
)

// BenchmarkApply applies a snapshot of 10,000 routes to a running data plane: validation,
// compilation, cluster set-up and the swap. It reports the heap the data plane holds with the
// table loaded (MiB-held) besides the time per apply.
func BenchmarkApply(b *testing.B) {
	const routes = 10000
	sets := make([]*resource.Set, 2)
	for i := range sets {
		res := snaptest.Resources(b,
			snaptest.HTTP("bench/gw", 80, snaptest.VHost("http", "", snaptest.ScaleRoutes(routes, "bench/app:80")...)),
			snaptest.Cluster(b, "bench/app:80", "127.0.0.1:18080"))
		s, err := resource.NewSet(fmt.Sprintf("v%d", i), res)
		if err != nil {
			b.Fatal(err)
		}
		sets[i] = s
	}
	before := heap()
	d, err := dataplane.New(logr.Discard(), dataplane.Options{Listener: listenOn127()})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = d.Shutdown(context.Background()) }()
	if err := d.Apply(context.Background(), sets[0]); err != nil {
		b.Fatal(err)
	}
	held := heap() - before
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if err := d.Apply(context.Background(), sets[i%2]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(held)/(1<<20), "MiB-held")
}

func heap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
