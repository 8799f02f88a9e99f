package graph_test

import (
	"fmt"
	"testing"

	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/snapshot"
	"coxswain.dev/coxswain/internal/state/statetest"
)

// BenchmarkBuildCompile measures the whole pure pipeline, Build then Compile, for
// statetest.Synthetic: 10 Gateways, one Service per 10 routes and routes of two rules with two
// matches each.
func BenchmarkBuildCompile(b *testing.B) {
	for _, routes := range []int{1000, 10000} {
		cs := statetest.Synthetic(routes)
		b.Run(fmt.Sprintf("routes=%d", routes), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				snapshot.Compile(graph.Build(cs, graph.Options{}))
			}
		})
	}
}
