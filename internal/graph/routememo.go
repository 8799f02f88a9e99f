package graph

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/internal/graph/conditions"
)

// RouteMemo holds what the last Build that used it resolved of every HTTPRoute, so that the
// next Build works again only on the routes marked with RouteChanged:
//
//   - the resolved rules of every route with a parentRef to one of our Gateways;
//   - the parentRefs of every route and, for each one, the listeners the route attached to there
//     with their hostnames and the parent's conditions, which the next Build replays onto its
//     new Gateways instead of resolving and attaching the route again;
//   - the routes' keys in namespace/name order.
//
// The caller vouches for what else they read. Rules: a change to a Service a route references
// must mark that route, and a change to ReferenceGrants or BackendTLSPolicies needs Reset.
// Parents: a change to any Gateway needs ParentsChanged, and a change to a GatewayClass,
// ListenerSet or Namespace, or to the Build's options, needs Reset. The Rules and attached
// hostnames of a Graph built with a memo are shared with the graphs built after it and must
// not be modified, nor the conditions of their routes' parents (a condition is replaced, never
// written in place).
type RouteMemo struct {
	routes map[types.NamespacedName]*memoRoute
	dirty  map[types.NamespacedName]bool
	// build counts the Builds; every route a Build uses is stamped with it, and finish drops
	// the others.
	build uint64
	// parentsGen counts ParentsChanged and Reset: a route's parents recorded under another
	// generation are resolved again.
	parentsGen uint64
	// keys are the keys of the last Build's HTTPRoutes in namespace/name order; sorted says
	// whether they are kept, which a Reset undoes.
	keys   []types.NamespacedName
	sorted bool
	// clusterUses counts, for every cluster, the routes of the last Build whose rules use it
	// (memoRoute.counted), so that a Build marks the clusters in use without visiting every
	// route's rules.
	clusterUses map[ClusterKey]int
}

// memoRoute is what a Build resolved of one HTTPRoute.
type memoRoute struct {
	build uint64
	// id is the route's ID.
	id string
	// rules is nil for a route that has no parentRef to one of our Gateways.
	rules *resolvedRules
	// parents are the route's parentRefs to our Gateways as the Build of generation
	// parentsGen attached them; none for a route with no such parentRef.
	parents    []memoParent
	parentsGen uint64
	hasParents bool
	// counted is the rules whose clusters clusterUses counts for the route; nil when none.
	counted *resolvedRules
}

type resolvedRules struct {
	rules        []*Rule
	invalid      *metav1.Condition
	resolvedRefs *metav1.Condition
	clusters     []ClusterKey
}

// memoParent is one Parent as attach left it.
type memoParent struct {
	ref gwapiv1.ParentReference
	// gateway is the Gateway's key, or the ListenerSet's when set.
	gateway types.NamespacedName
	// index is the Gateway's among the build's Gateways in key order: while no Gateway changes
	// (see RouteMemo.ParentsChanged), it finds the Gateway without hashing its key.
	index      int
	set        bool
	accepted   bool
	conditions []metav1.Condition
	attached   []listenerAttachment
}

// listenerAttachment is a listener a route attached to: its index among the listeners its
// parentRef can select (Parent.listeners), and the hostnames the route answers to there.
type listenerAttachment struct {
	index     int
	hostnames []AttachedHostname
}

// NewRouteMemo returns an empty RouteMemo.
func NewRouteMemo() *RouteMemo {
	return &RouteMemo{
		routes: map[types.NamespacedName]*memoRoute{}, dirty: map[types.NamespacedName]bool{},
		clusterUses: map[ClusterKey]int{},
	}
}

// RouteChanged marks a route as created, changed or deleted, or as referencing a Service that was.
func (m *RouteMemo) RouteChanged(key types.NamespacedName) { m.dirty[key] = true }

// ParentsChanged forgets every route's parents and attachments, keeping their rules: a Gateway
// was created, changed or deleted.
func (m *RouteMemo) ParentsChanged() { m.parentsGen++ }

// Reset forgets every route.
func (m *RouteMemo) Reset() {
	clear(m.routes)
	clear(m.dirty)
	clear(m.clusterUses)
	m.parentsGen++
	m.keys, m.sorted = nil, false
}

// routeKeys returns the keys of the state's HTTPRoutes in namespace/name order: those of the
// last Build with the marked routes inserted or removed, or sorted again without a memo.
func (b *builder) routeKeys() []types.NamespacedName {
	m := b.opts.Routes
	if m == nil {
		return sortedKeys(b.cs.HTTPRoutes)
	}
	if m.sorted {
		for key := range m.dirty {
			i, found := slices.BinarySearchFunc(m.keys, key, compareKeys)
			_, exists := b.cs.HTTPRoutes[key]
			switch {
			case exists && !found:
				m.keys = slices.Insert(m.keys, i, key)
			case !exists && found:
				m.keys = slices.Delete(m.keys, i, i+1)
			}
		}
	}
	// A count that differs means a route changed without RouteChanged: sort from scratch rather
	// than leave it out.
	if !m.sorted || len(m.keys) != len(b.cs.HTTPRoutes) {
		m.keys, m.sorted = sortedKeys(b.cs.HTTPRoutes), true
	}
	return m.keys
}

// memoOf returns the memo's entry for a route, stamped as used by this Build, and whether what
// it holds may be used (the route is not marked); nil without a memo.
func (b *builder) memoOf(key types.NamespacedName) (*memoRoute, bool) {
	m := b.opts.Routes
	if m == nil {
		return nil, false
	}
	mr, ok := m.routes[key]
	if !ok || m.dirty[key] {
		if mr != nil {
			m.count(mr, nil)
		}
		mr = &memoRoute{}
		m.routes[key] = mr
		ok = false
	}
	mr.build = m.build + 1
	return mr, ok
}

// replayParents rebuilds a route's parents from the memo and attaches it to the listeners it
// attached to before; false, with nothing done, when the memo holds no parents of this
// generation.
func (b *builder) replayParents(r *HTTPRoute, mr *memoRoute, blk *routeBlock) bool {
	if mr == nil || !mr.hasParents || mr.parentsGen != b.opts.Routes.parentsGen {
		return false
	}
	one := len(mr.parents) == 1
	parents := blk.parents[:0]
	if !one {
		parents = make([]*Parent, 0, len(mr.parents))
	}
	for i := range mr.parents {
		mp := &mr.parents[i]
		p := &blk.parent
		if !one {
			p = &Parent{}
		}
		*p = Parent{Ref: mp.ref, Accepted: mp.accepted, Conditions: mp.conditions}
		if mp.set {
			ls, ok := b.listenerSets[mp.gateway]
			if !ok {
				return false
			}
			p.Gateway, p.Set = ls.Gateway, ls
		} else if p.Gateway = b.gatewayAt(mp.index, mp.gateway); p.Gateway == nil {
			return false
		}
		parents = append(parents, p)
	}
	r.Parents = parents
	att := &blk.att
	for i, p := range parents {
		listeners := p.listeners()
		for _, a := range mr.parents[i].attached {
			listeners[a.index].addRoute(r, a.hostnames, att)
			att = nil
		}
	}
	return true
}

// gatewayAt returns the Gateway of key, found at index i of the Gateways in key order when it is
// there.
func (b *builder) gatewayAt(i int, key types.NamespacedName) *Gateway {
	if i >= 0 && i < len(b.gatewayList) && b.gatewayList[i].Key() == key {
		return b.gatewayList[i]
	}
	return b.gateways[key]
}

// recordParents keeps a route's parents as attach left them, their conditions stamped with
// the route's generation: the graphs built from the memo share them, and stampRoutes finds
// nothing to write there.
func (b *builder) recordParents(r *HTTPRoute, mr *memoRoute, parents []*Parent, attached [][]listenerAttachment) {
	if mr == nil {
		return
	}
	mr.parents = make([]memoParent, len(parents))
	for i, p := range parents {
		conditions.Stamp(p.Conditions, r.Source.Generation)
		mp := memoParent{ref: p.Ref, accepted: p.Accepted, conditions: p.Conditions, attached: attached[i]}
		if p.Set != nil {
			mp.gateway, mp.set = p.Set.Key(), true
		} else {
			mp.gateway = p.Gateway.Key()
			mp.index = p.Gateway.order
		}
		mr.parents[i] = mp
	}
	mr.parentsGen, mr.hasParents = b.opts.Routes.parentsGen, true
}

// rules sets r's rules: from the memo entry when usable and it holds them, resolved otherwise
// (and kept in the entry), whose clusters the memo then counts as used. Without a memo,
// resolving the rules marks their clusters.
func (b *builder) rules(r *HTTPRoute, mr *memoRoute, usable bool) {
	if mr == nil {
		b.buildRules(r)
		return
	}
	rr := mr.rules
	if !usable || rr == nil {
		b.buildRules(r)
		rr = &resolvedRules{rules: r.Rules, invalid: r.invalid, resolvedRefs: r.resolvedRefs, clusters: usedClusters(r.Rules)}
		mr.rules = rr
	}
	r.Rules, r.invalid, r.resolvedRefs = rr.rules, rr.invalid, rr.resolvedRefs
	b.opts.Routes.count(mr, rr)
}

// count makes clusterUses count the clusters of rr for a route instead of those it counted
// before; rr nil counts none.
func (m *RouteMemo) count(mr *memoRoute, rr *resolvedRules) {
	if mr.counted == rr {
		return
	}
	if mr.counted != nil {
		for _, k := range mr.counted.clusters {
			if m.clusterUses[k]--; m.clusterUses[k] == 0 {
				delete(m.clusterUses, k)
			}
		}
	}
	if rr != nil {
		for _, k := range rr.clusters {
			m.clusterUses[k]++
		}
	}
	mr.counted = rr
}

// finishRoutes makes the routes of this Build the memo, and marks the clusters its routes use.
func (b *builder) finishRoutes() {
	if m := b.opts.Routes; m != nil {
		m.build++
		for key, mr := range m.routes {
			if mr.build != m.build {
				m.count(mr, nil)
				delete(m.routes, key)
			}
		}
		clear(m.dirty)
		for k := range m.clusterUses {
			b.clusters[k] = true
		}
	}
}

// usedClusters returns the clusters of the valid backends and mirrors of rules.
func usedClusters(rules []*Rule) []ClusterKey {
	var out []ClusterKey
	for _, rule := range rules {
		for _, f := range rule.Filters {
			if f.Mirror != nil {
				out = append(out, f.Mirror.Cluster)
			}
		}
		for _, be := range rule.Backends {
			if be.Valid {
				out = append(out, be.Cluster)
			}
		}
	}
	return out
}
