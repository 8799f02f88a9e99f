package router_test

import (
	"fmt"
	"testing"

	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// BenchmarkMatch routes one request through tables of 1, 1,000 and 10,000 routes.
func BenchmarkMatch(b *testing.B) {
	for _, n := range []int{1, 1000, 10000} {
		b.Run(fmt.Sprintf("routes=%d", n), func(b *testing.B) {
			table := compile(b, snaptest.HTTP("bench/gw", 80, snaptest.VHost("http", "", snaptest.ScaleRoutes(n, "bench/app:80")...)),
				snaptest.Cluster(b, "bench/app:80", "127.0.0.1:8080"))
			host, path := snaptest.ScaleTarget(n / 2)
			path += "/items/42"
			req := request{}
			p, _ := table.Port(80)
			b.ReportAllocs()
			for b.Loop() {
				h := router.NormalizeHost(host)
				vh, _ := p.VirtualHost(h)
				if vh.Match(h, "GET", path, req) == nil {
					b.Fatal("no match")
				}
			}
		})
	}
}

// BenchmarkCompile compiles a table of 10,000 routes from its resources.
func BenchmarkCompile(b *testing.B) {
	res := snaptest.Resources(b, snaptest.HTTP("bench/gw", 80, snaptest.VHost("http", "", snaptest.ScaleRoutes(10000, "bench/app:80")...)),
		snaptest.Cluster(b, "bench/app:80", "127.0.0.1:8080"))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := router.Compile(snaptest.Seq(res)); err != nil {
			b.Fatal(err)
		}
	}
}
