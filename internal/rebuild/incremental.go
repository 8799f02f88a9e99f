package rebuild

import (
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/internal/encode"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/snapshot"
	"coxswain.dev/coxswain/internal/state"
)

// ErrScopePanicked reports a scope whose compile or encode panicked.
var ErrScopePanicked = errors.New("rebuild: scope compile panicked")

// ErrSnapshotTooLarge reports a scope whose new snapshot's encoding is larger than
// discoveryv1.MaxSnapshotBytes: no stream could send it, so the scope keeps its last snapshot.
var ErrSnapshotTooLarge = errors.New("rebuild: snapshot larger than a stream may send")

// ScopeFailure is a scope whose compile or encode failed in a rebuild.
type ScopeFailure struct {
	Scope cache.Scope
	Err   error
}

// incremental keeps, per scope, the compile and encode memos of the last rebuild, and what that
// rebuild read, so that a rebuild compiles again only the routes and scopes its changes can
// affect, and encodes and hashes only the resources whose content changed. Every memo is one
// scope's own: nothing compiled or encoded for one scope is ever looked up for another.
type incremental struct {
	seen   *seen
	routes *graph.RouteMemo
	scopes map[snapshot.Scope]*scopeMemo
	// gateways maps every accepted Gateway of the last rebuild to its scope.
	gateways map[types.NamespacedName]snapshot.Scope
	// refusals are the last graph's SizeRefusals.
	refusals []graph.SizeRefusal
	// sizes holds the encoded size of every scope's latest snapshot, published or refused.
	sizes map[cache.Scope]int
}

type scopeMemo struct {
	compile *snapshot.Memo
	encode  *encode.Memo
	// last is what the scope's last successful encoding returned.
	last *encode.Encoded
}

// scopeEncoding is one scope's encoding; Unchanged means it is the one the last rebuild
// published, neither encoded nor hashed again.
type scopeEncoding struct {
	*encode.Encoded
	Unchanged bool
	// Gateways are the Gateways the scope serves.
	Gateways []*graph.Gateway
}

// prepare compares the state with the last rebuild's and drops from the graph's route memo what
// the changes may have made stale; encode does the same for the scope memos.
func (inc *incremental) prepare(cs *state.ClusterState, opts graph.Options) changes {
	c := inc.seen.diff(cs, opts)
	if inc.routes == nil {
		inc.routes = graph.NewRouteMemo()
	}
	switch {
	case c.all:
		inc.routes.Reset()
	case len(c.gateways) > 0:
		inc.routes.ParentsChanged()
	}
	for key := range c.routes {
		inc.routes.RouteChanged(key)
	}
	return c
}

// encode compiles and encodes every scope of g, each inside its own failure boundary: a scope
// whose compile or encode fails (or panics) is reported in the failures and the others go on.
func (inc *incremental) encode(g *graph.Graph, c changes, hook func(cache.Scope)) ([]scopeEncoding, []ScopeFailure) {
	plans := snapshot.Plan(g)
	inc.forget(c, plans)
	if !slices.Equal(inc.refusals, g.SizeRefusals) {
		// A route refused or let in again for its scope's size changes what its listeners
		// hold without being marked changed: compile every scope afresh.
		for _, sm := range inc.scopes {
			sm.compile = snapshot.NewMemo()
		}
		inc.refusals = g.SizeRefusals
	}
	sizes := make(map[cache.Scope]int, len(plans))
	out := make([]scopeEncoding, 0, len(plans))
	var failed []ScopeFailure
	for _, p := range plans {
		sm := inc.scopes[p.Scope]
		if sm == nil {
			sm = &scopeMemo{compile: snapshot.NewMemo(), encode: encode.NewMemo()}
			inc.scopes[p.Scope] = sm
		}
		e, err := compileAndEncode(p, g.Clusters, sm, hook)
		if err != nil {
			// The memos may hold half a compile: the scope starts over next time.
			delete(inc.scopes, p.Scope)
			failed = append(failed, ScopeFailure{Scope: encode.Scope(p.Scope), Err: err})
			if size, ok := inc.sizes[encode.Scope(p.Scope)]; ok {
				sizes[encode.Scope(p.Scope)] = size
			}
			continue
		}
		size := e.Snapshot.EncodedSize()
		sizes[e.Scope] = size
		if size > discoveryv1.MaxSnapshotBytes {
			// The memos hold a whole compile: the next rebuild starts from them.
			failed = append(failed, ScopeFailure{Scope: e.Scope, Err: fmt.Errorf(
				"%w: its encoding takes %d bytes, more than the %d a snapshot may take", ErrSnapshotTooLarge, size, discoveryv1.MaxSnapshotBytes)})
			continue
		}
		out = append(out, scopeEncoding{Encoded: e, Unchanged: e == sm.last, Gateways: p.Gateways})
		sm.last = e
	}
	inc.sizes = sizes
	return out, failed
}

// forget drops from the memos what the changes may have made stale: everything, the scopes
// that serve (or served) a changed Gateway, and the compiled routes of changed routes; and the
// memos of scopes no longer served.
func (inc *incremental) forget(c changes, plans []snapshot.ScopePlan) {
	if c.all || inc.scopes == nil {
		inc.scopes = map[snapshot.Scope]*scopeMemo{}
	}
	gateways := map[types.NamespacedName]snapshot.Scope{}
	served := map[snapshot.Scope]bool{}
	for _, p := range plans {
		served[p.Scope] = true
		for _, gw := range p.Gateways {
			gateways[gw.Key()] = p.Scope
		}
	}
	for _, key := range c.gateways {
		for _, scopes := range []map[types.NamespacedName]snapshot.Scope{inc.gateways, gateways} {
			if s, ok := scopes[key]; ok {
				if sm := inc.scopes[s]; sm != nil {
					sm.compile = snapshot.NewMemo()
				}
			}
		}
	}
	inc.gateways = gateways
	for s, sm := range inc.scopes {
		if !served[s] {
			delete(inc.scopes, s)
			continue
		}
		for key := range c.routes {
			sm.compile.RouteChanged(key)
		}
	}
}

// compileAndEncode compiles and encodes one scope; a panic becomes its error.
func compileAndEncode(p snapshot.ScopePlan, clusters []*graph.Cluster, sm *scopeMemo, hook func(cache.Scope)) (e *encode.Encoded, err error) {
	defer func() {
		if r := recover(); r != nil {
			e, err = nil, fmt.Errorf("%w: %v", ErrScopePanicked, r)
		}
	}()
	if hook != nil {
		hook(encode.Scope(p.Scope))
	}
	return sm.encode.Snapshot(snapshot.CompileScope(p, clusters, sm.compile))
}
