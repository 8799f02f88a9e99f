package graph_test

import (
	"fmt"
	"reflect"
	"testing"

	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/state/statetest"
)

// Tests that a Build that takes every route's rules and attachments from a RouteMemo gives the
// graph a Build without one gives: the same rules, listeners' routes and status, for every
// golden input.
func TestRouteMemoGivesTheGraphOfAFullBuild(t *testing.T) {
	t.Parallel()
	for _, in := range statetest.GoldenInputs(t, "testdata") {
		t.Run(in.Name, func(t *testing.T) {
			t.Parallel()
			cs := in.State(t)
			want := graph.Build(cs, graph.Options{})
			memo := graph.NewRouteMemo()
			graph.Build(cs, graph.Options{Routes: memo}) // fills the memo
			got := graph.Build(cs, graph.Options{Routes: memo})
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
			if w, g := attachments(want), attachments(got); !reflect.DeepEqual(w, g) {
				t.Errorf("attachments differ from a build without the memo\ngot  %v\nwant %v", g, w)
			}
		})
	}
}

// attachments lists, for every listener of every Gateway and ListenerSet, the routes attached
// to it with their hostnames.
func attachments(g *graph.Graph) []string {
	var out []string
	for _, gw := range g.Gateways {
		for _, l := range gw.AllListeners() {
			for _, a := range l.Routes {
				out = append(out, fmt.Sprintf("%s/%s: %s %v", gw.Key(), l.Name, a.Route.ID(), a.Hostnames))
			}
		}
	}
	return out
}
