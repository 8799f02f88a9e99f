package graph

import (
	"testing"

	"coxswain.dev/coxswain/internal/state/statetest"
)

// Tests that a RouteMemo forgets a deleted route, keeps one entry per route and its entries in
// the order of its keys, and hands on an unchanged route as the very HTTPRoute of the Build
// that made it, with the very attachments of the first Build that handed it on.
func TestRouteMemoForgetsDeletedRoutesAndHandsOnTheOthers(t *testing.T) {
	t.Parallel()
	cs := statetest.Synthetic(100)
	m := NewRouteMemo()
	first := Build(cs, Options{Routes: m})
	second := Build(cs, Options{Routes: m})
	third := Build(cs, Options{Routes: m})
	if len(first.HTTPRoutes) == 0 {
		t.Fatal("no routes")
	}
	for i, r := range first.HTTPRoutes {
		if r != second.HTTPRoutes[i] || r != third.HTTPRoutes[i] {
			t.Fatalf("route %s made again with nothing changed", r.Key())
		}
	}
	attached := func(g *Graph) map[*Attachment]bool {
		out := map[*Attachment]bool{}
		for _, gw := range g.Gateways {
			for _, l := range gw.Listeners {
				for _, a := range l.Routes {
					out[a] = true
				}
			}
		}
		return out
	}
	before := attached(second)
	for a := range attached(third) {
		if !before[a] {
			t.Fatalf("attachment of %s made again with nothing changed", a.Route.Key())
		}
	}

	var gone *HTTPRoute
	for _, r := range third.HTTPRoutes {
		gone = r
		break
	}
	delete(cs.HTTPRoutes, gone.Key())
	m.RouteChanged(gone.Key())
	Build(cs, Options{Routes: m})
	if _, ok := m.routes[gone.Key()]; ok {
		t.Errorf("the memo still holds deleted route %s", gone.Key())
	}
	if len(m.routes) != len(cs.HTTPRoutes) || len(m.keys) != len(cs.HTTPRoutes) || len(m.entries) != len(m.keys) {
		t.Errorf("memo holds %d routes, %d keys and %d entries for %d routes", len(m.routes), len(m.keys), len(m.entries), len(cs.HTTPRoutes))
	}
	for i, key := range m.keys {
		if m.entries[i] != m.routes[key] {
			t.Fatalf("entry %d is not the memo's entry of %s", i, key)
		}
	}
}
