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
// discoveryv1.MaxScopeRouteBytes, every copy counted (routeCopyBytes over-estimates a copy's
// encoding); the older routes come first, as with every other limit, and the route that does
// not fit is refused on that scope's Gateways (SnapshotSizeLimitReached) and detached from their
// listeners. g.RouteBytes gets what the accepted routes of each namespace take of each scope.
// A refused route is replaced in the graph by a copy with its parents' new
// conditions: a RouteMemo's routes are shared with later Builds. It returns the refusals,
// sorted.
func boundScopeSizes(g *Graph, perNamespace int64) []SizeRefusal {
	usage, order := scopeUsage(g.Gateways)
	refused := map[*HTTPRoute]map[types.NamespacedName]string{}
	var out []SizeRefusal
	g.RouteBytes = make(map[types.NamespacedName]map[string]int64, len(order))
	for _, scope := range order {
		routes := usage[scope]
		slices.SortFunc(routes, func(a, b scopeRoute) int { return compareAge(a.route, b.route) })
		taken := map[string]int64{}
		g.RouteBytes[scope] = taken
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
	}
	if len(refused) == 0 {
		return nil
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

// scopeUsage adds up, per scope and route, what the route's copies on the programmed listeners
// of the scope's accepted Gateways take: what the snapshot compiler makes of them. It returns
// the scopes in the order of their first Gateway.
func scopeUsage(gateways []*Gateway) (map[types.NamespacedName][]scopeRoute, []types.NamespacedName) {
	usage := map[types.NamespacedName][]scopeRoute{}
	index := map[types.NamespacedName]map[*HTTPRoute]int{}
	var order []types.NamespacedName
	for _, gw := range gateways {
		if !gw.Accepted {
			continue
		}
		scope := scopeKey(gw)
		if _, ok := index[scope]; !ok {
			index[scope] = map[*HTTPRoute]int{}
			order = append(order, scope)
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
	return usage, order
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
		msg := scopes[scopeKey(p.Gateway)]
		if !p.Accepted || msg == "" {
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
