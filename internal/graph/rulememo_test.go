package graph_test

import (
	"reflect"
	"testing"

	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/state/statetest"
)

// Tests that a Build that takes every route's rules from a RuleMemo gives the graph a Build
// without one gives: the same rules and the same status, for every golden input.
func TestRuleMemoGivesTheGraphOfAFullBuild(t *testing.T) {
	t.Parallel()
	for _, in := range statetest.GoldenInputs(t, "testdata") {
		t.Run(in.Name, func(t *testing.T) {
			t.Parallel()
			cs := in.State(t)
			want := graph.Build(cs, graph.Options{})
			memo := graph.NewRuleMemo()
			graph.Build(cs, graph.Options{Rules: memo}) // fills the memo
			got := graph.Build(cs, graph.Options{Rules: memo})
			if !reflect.DeepEqual(want.Status(), got.Status()) {
				t.Errorf("status differs from a build without the memo")
			}
			if len(want.HTTPRoutes) != len(got.HTTPRoutes) {
				t.Fatalf("%d routes, want %d", len(got.HTTPRoutes), len(want.HTTPRoutes))
			}
			for i := range want.HTTPRoutes {
				if !reflect.DeepEqual(want.HTTPRoutes[i].Rules, got.HTTPRoutes[i].Rules) {
					t.Errorf("rules of %s differ from a build without the memo", want.HTTPRoutes[i].Key())
				}
			}
			if !reflect.DeepEqual(want.Clusters, got.Clusters) {
				t.Errorf("clusters differ from a build without the memo")
			}
		})
	}
}
