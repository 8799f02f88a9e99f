package graph

import (
	"cmp"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/internal/graph/conditions"
)

// SizeRefusal is a route refused on the Gateways of one scope because its copies in the scope's
// snapshot would take too many bytes (see boundScopeSizes).
type SizeRefusal struct {
	// Scope is the dedicated Gateway whose proxy the route was refused on, or the zero key for
	// the shared pool.
	Scope types.NamespacedName
	// Route is the route's ID.
	Route string
}

// scopeKey is the scope that serves gw: its own key for a dedicated Gateway, the zero key for
// the shared pool.
func scopeKey(gw *Gateway) types.NamespacedName {
	if gw.Dedicated {
		return gw.Key()
	}
	return types.NamespacedName{}
}

func scopeName(scope types.NamespacedName) string {
	if scope == (types.NamespacedName{}) {
		return "the shared pool"
	}
	return "the proxy of Gateway " + scope.String()
}

// scopeRoute is a route with the encoded bytes its copies take of one scope's snapshot.
type scopeRoute struct {
	route *HTTPRoute
	bytes int64
}

// boundScopeSizes keeps the snapshot of every scope sendable. A route is copied into the route
// set of every listener and hostname it attaches to, so a few large routes on a Gateway with
// many listeners can make a snapshot larger than a stream may send, and then no proxy of the
// scope gets any change. For each scope, the routes of each namespace take at most perNamespace
// encoded bytes together and the routes of all namespaces at most
// discoveryv1.MaxScopeRouteBytes, every copy counted (attachmentBytes over-estimates a copy's
// encoding); the older routes come first, as with every other limit, and the route that does
// not fit is refused on that scope's Gateways (SnapshotSizeLimitReached) and detached from their
// listeners. A refused route is replaced in the graph by a copy with its parents' new
// conditions: a RouteMemo's routes are shared with later Builds. It returns the refusals,
// sorted.
func boundScopeSizes(g *Graph, perNamespace int64) []SizeRefusal {
	totals, order := scopeTotals(g.Gateways)
	var full []types.NamespacedName
	for _, scope := range order {
		switch {
		case totals[scope] <= min(perNamespace, discoveryv1.MaxScopeRouteBytes):
			// The usual case: every route fits, and no namespace need be looked at alone.
		case totals[scope] > discoveryv1.MaxScopeRouteBytes || anyAbove(namespaceShares(g.Gateways, scope), perNamespace):
			full = append(full, scope)
		}
	}
	if len(full) == 0 {
		return nil
	}
	usage := scopeUsage(g.Gateways, full)
	refused := map[*HTTPRoute]map[types.NamespacedName]string{}
	var out []SizeRefusal
	for _, scope := range full {
		out = refuseBeyond(out, refused, scope, usage[scope], perNamespace)
	}
	detachRefused(g.Gateways, refused)
	for _, list := range [][]*HTTPRoute{g.HTTPRoutes, g.GRPCRoutes, g.TLSRoutes, g.TCPRoutes, g.UDPRoutes} {
		for i, r := range list {
			if scopes, ok := refused[r]; ok {
				list[i] = refuseParents(r, scopes)
			}
		}
	}
	slices.SortFunc(out, func(a, b SizeRefusal) int {
		return cmp.Or(compareKeys(a.Scope, b.Scope), cmp.Compare(a.Route, b.Route))
	})
	return out
}

// refuseBeyond takes the routes of scope oldest first, keeps those that fit in their
// namespace's share and in what the scope's routes may take, and records the others in refused
// with why, and in out.
func refuseBeyond(out []SizeRefusal, refused map[*HTTPRoute]map[types.NamespacedName]string, scope types.NamespacedName, routes []scopeRoute, perNamespace int64) []SizeRefusal {
	slices.SortFunc(routes, func(a, b scopeRoute) int { return compareAge(a.route, b.route) })
	taken := map[string]int64{}
	var total int64
	for _, sr := range routes {
		ns := sr.route.Source.Namespace
		var msg string
		switch {
		case taken[ns]+sr.bytes > perNamespace:
			msg = fmt.Sprintf("Not served by %s: the routes of namespace %s would take %d bytes of its snapshot with this one's %d, more than the %d one namespace may take; older routes come first",
				scopeName(scope), ns, taken[ns]+sr.bytes, sr.bytes, perNamespace)
		case total+sr.bytes > discoveryv1.MaxScopeRouteBytes:
			msg = fmt.Sprintf("Not served by %s: its routes would take %d bytes of its snapshot with this one's %d, more than the %d one snapshot may hold; older routes come first",
				scopeName(scope), total+sr.bytes, sr.bytes, discoveryv1.MaxScopeRouteBytes)
		default:
			taken[ns] += sr.bytes
			total += sr.bytes
			continue
		}
		if refused[sr.route] == nil {
			refused[sr.route] = map[types.NamespacedName]string{}
		}
		refused[sr.route][scope] = msg
		out = append(out, SizeRefusal{Scope: scope, Route: sr.route.ID()})
	}
	return out
}

// anyAbove reports whether a namespace's share is above limit.
func anyAbove(shares map[string]int64, limit int64) bool {
	for _, n := range shares {
		if n > limit {
			return true
		}
	}
	return false
}

// scopeTotals adds up, per scope, what the copies of the routes on the programmed listeners of
// the scope's accepted Gateways take (see attachmentBytes). It returns the scopes in the order
// of their first Gateway.
func scopeTotals(gateways []*Gateway) (map[types.NamespacedName]int64, []types.NamespacedName) {
	totals := map[types.NamespacedName]int64{}
	var order []types.NamespacedName
	for _, gw := range gateways {
		if !gw.Accepted {
			continue
		}
		scope := scopeKey(gw)
		if _, ok := totals[scope]; !ok {
			order = append(order, scope)
		}
		var total int64
		for _, l := range gw.AllListeners() {
			if l.Programmed() {
				for _, a := range l.Routes {
					total += attachmentBytes(gw, l, a)
				}
			}
		}
		totals[scope] += total
	}
	return totals, order
}

// namespaceShares adds up, per namespace, what the copies of its routes on the programmed
// listeners of the accepted Gateways of scope take. A listener's routes are in namespace/name
// order, so a namespace's are added up before its share is looked up.
func namespaceShares(gateways []*Gateway, scope types.NamespacedName) map[string]int64 {
	shares := map[string]int64{}
	for _, gw := range gateways {
		if !gw.Accepted || scopeKey(gw) != scope {
			continue
		}
		var ns string
		var run int64
		for _, l := range gw.AllListeners() {
			if !l.Programmed() {
				continue
			}
			for _, a := range l.Routes {
				if a.Route.Source.Namespace != ns {
					if run > 0 {
						shares[ns] += run
					}
					ns, run = a.Route.Source.Namespace, 0
				}
				run += attachmentBytes(gw, l, a)
			}
		}
		if run > 0 {
			shares[ns] += run
		}
	}
	return shares
}

// RouteBytes over-estimates, for every scope (keyed as SizeRefusal.Scope) and namespace, the
// encoded bytes the copies of the namespace's accepted routes take of the scope's snapshot: what
// the size limits judge.
func (g *Graph) RouteBytes() map[types.NamespacedName]map[string]int64 {
	_, order := scopeTotals(g.Gateways)
	out := make(map[types.NamespacedName]map[string]int64, len(order))
	for _, scope := range order {
		out[scope] = namespaceShares(g.Gateways, scope)
	}
	return out
}

// scopeUsage adds up, per scope of scopes and route, what the route's copies on the programmed
// listeners of the scope's accepted Gateways take.
func scopeUsage(gateways []*Gateway, scopes []types.NamespacedName) map[types.NamespacedName][]scopeRoute {
	usage := make(map[types.NamespacedName][]scopeRoute, len(scopes))
	index := make(map[types.NamespacedName]map[*HTTPRoute]int, len(scopes))
	for _, scope := range scopes {
		index[scope] = map[*HTTPRoute]int{}
	}
	for _, gw := range gateways {
		scope := scopeKey(gw)
		if !gw.Accepted || index[scope] == nil {
			continue
		}
		for _, l := range gw.AllListeners() {
			if !l.Programmed() {
				continue
			}
			for _, a := range l.Routes {
				i, ok := index[scope][a.Route]
				if !ok {
					i = len(usage[scope])
					index[scope][a.Route] = i
					usage[scope] = append(usage[scope], scopeRoute{route: a.Route})
				}
				usage[scope][i].bytes += attachmentBytes(gw, l, a)
			}
		}
	}
	return usage
}

// compareAge orders routes as the spec orders conflicting ones: creation time, then kind and
// "<namespace>/<name>" (the ID).
func compareAge(a, b *HTTPRoute) int {
	ta, tb := a.Source.CreationTimestamp, b.Source.CreationTimestamp
	if !ta.Equal(&tb) {
		if ta.Before(&tb) {
			return -1
		}
		return 1
	}
	return cmp.Compare(a.ID(), b.ID())
}

// detachRefused removes the refused routes from the listeners of the Gateways of the scopes
// they are refused on.
func detachRefused(gateways []*Gateway, refused map[*HTTPRoute]map[types.NamespacedName]string) {
	for _, gw := range gateways {
		scope := scopeKey(gw)
		for _, l := range gw.AllListeners() {
			if !slices.ContainsFunc(l.Routes, func(a *Attachment) bool { return refused[a.Route][scope] != "" }) {
				continue
			}
			kept := make([]*Attachment, 0, len(l.Routes))
			for _, a := range l.Routes {
				if refused[a.Route][scope] == "" {
					kept = append(kept, a)
				}
			}
			l.Routes = kept
		}
	}
}

// refuseParents returns a copy of r whose accepted parents on the Gateways of the scopes it is
// refused on are not accepted, with the reason.
func refuseParents(r *HTTPRoute, scopes map[types.NamespacedName]string) *HTTPRoute {
	cp := *r
	cp.Parents = make([]*Parent, len(r.Parents))
	for i, p := range r.Parents {
		cp.Parents[i] = p
		if !p.Accepted || p.Gateway == nil {
			continue
		}
		msg := scopes[scopeKey(p.Gateway)]
		if msg == "" {
			continue
		}
		refused := *p
		refused.Accepted = false
		cond := conditions.NewRouteSnapshotSizeLimitReached(msg)
		cond.ObservedGeneration = r.Source.Generation
		refused.Conditions = []metav1.Condition{cond}
		for _, c := range p.Conditions {
			if c.Type != cond.Type {
				refused.Conditions = append(refused.Conditions, c)
			}
		}
		cp.Parents[i] = &refused
	}
	return &cp
}
