package graph

import (
	"testing"

	"coxswain.dev/coxswain/internal/state/statetest"
)

// BenchmarkBoundScopeSizes measures what the size limits add to a Build of 5,000 routes
// (statetest.Synthetic) where every route fits: the walk over every attachment that adds up
// each scope's routes and, the shared pool's taking more than one namespace's share (9.6 MB
// counted), the walk that adds up each namespace's; every route's estimate is already made by
// an earlier Build.
func BenchmarkBoundScopeSizes(b *testing.B) {
	g := Build(statetest.Synthetic(5000), Options{})
	b.ReportAllocs()
	for b.Loop() {
		if refused := boundScopeSizes(g, 8<<20); len(refused) != 0 {
			b.Fatalf("refused %v", refused)
		}
	}
}
