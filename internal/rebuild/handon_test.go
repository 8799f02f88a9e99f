package rebuild

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/scopeauth"
	"coxswain.dev/coxswain/internal/state"
)

// deepReader is a status writer that reads every part of a graph a rebuild may hand on to the
// next: the status, every listener's attachments with their routes' rules and parents, and the
// clusters.
type deepReader struct{ reads atomic.Int64 }

func (w *deepReader) Write(_ context.Context, cs *state.ClusterState, g *graph.Graph) (int, error) {
	n := len(cs.HTTPRoutes)
	for _, gw := range g.Gateways {
		for _, l := range gw.Listeners {
			for _, a := range l.Routes {
				n += len(a.Hostnames) + len(a.Route.Rules) + len(a.Route.ID())
				for _, p := range a.Route.Parents {
					n += len(p.Conditions)
				}
			}
		}
	}
	for _, c := range g.Clusters {
		n += len(c.Endpoints) + len(c.Name())
	}
	if _, err := json.Marshal(g.Status()); err != nil {
		return 0, err
	}
	w.reads.Add(1)
	return n, nil
}

// Tests that a rebuild writes nothing of what it hands on from the graph before (routes, their
// parents and attachments, clusters) while the status loop reads that graph: the race detector,
// on in make test, watches the two. Each rebuild reads a new ClusterState holding the very
// objects that did not change, as Load gives it, with one route edited or an endpoint moved.
func TestRebuildsLeaveTheGraphTheStatusLoopReadsAlone(t *testing.T) {
	t.Parallel()
	e := newRouteEdit(200)
	reader := &deepReader{}
	p := &Pipeline{Cache: cache.New(nil), Authority: scopeauth.New(), Status: reader, IsLeader: func() bool { return true }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.RunStatus(ctx)
	waitFor(t, "the status loop starts", func() bool { return p.status.Load() != nil })
	slice := e.cs.EndpointSlices[firstKey(e.cs.EndpointSlices)]
	for i := range 200 {
		cs := *e.cs
		cs.HTTPRoutes = maps.Clone(e.cs.HTTPRoutes)
		cs.HTTPRoutes[e.key] = e.states[(i+1)%2]
		if i%5 == 0 {
			cs.EndpointSlices = maps.Clone(e.cs.EndpointSlices)
			moved := slice.DeepCopy()
			moved.ResourceVersion = fmt.Sprint(i)
			moved.Endpoints[0].Addresses = []string{fmt.Sprintf("10.9.%d.%d", i/250, i%250+1)}
			cs.EndpointSlices[firstKey(e.cs.EndpointSlices)] = moved
		}
		if _, err := p.Rebuild(ctx, Input{State: &cs}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the status loop reads", func() bool { return reader.reads.Load() > 1 })
}

// firstKey returns the least key of m, so that every run moves the same slice.
func firstKey[V any](m map[types.NamespacedName]V) types.NamespacedName {
	return slices.MinFunc(slices.Collect(maps.Keys(m)), func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
}
