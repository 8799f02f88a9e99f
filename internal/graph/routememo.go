package graph

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
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
//   - the routes' keys in namespace/name order;
//   - the HTTPRoute value the last Build made of each route, which the next Build hands on as it
//     is while the route is not marked, its parents' generation is current and no GRPCRoute
//     exists (see reuse);
//   - the clusters no BackendTLSPolicy selects, each with the Service and EndpointSlice objects
//     it was made of, handed on while those are the very same objects (see cluster).
//
// The caller vouches for what else they read. Rules: a change to a Service a route references
// must mark that route, and a change to ReferenceGrants or BackendTLSPolicies needs Reset.
// Parents: a change to any Gateway needs ParentsChanged, and a change to a GatewayClass,
// ListenerSet or Namespace, or to the Build's options, needs Reset. Objects read are replaced
// when they change, never modified in place. The HTTPRoutes (with their Rules, parents and
// attached hostnames) and Clusters of a Graph built with a memo are shared with the graphs
// built after it and must not be modified (a condition is replaced, never written in place).
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
	// entries holds the memo entry of each of keys, in their order (nil for a key no Build
	// visited yet), so that a Build finds an unmarked route's entry without hashing its key.
	entries []*memoRoute
	// resorted says that this Build sorted the keys from scratch: finishRoutes then looks at
	// every entry, not only at the marked routes'.
	resorted bool
	// clusterUses counts, for every cluster, the routes of the last Build whose rules use it
	// (memoRoute.counted), so that a Build marks the clusters in use without visiting every
	// route's rules.
	clusterUses map[ClusterKey]int
	// clusters holds the clusters of the last Build without a BackendTLSPolicy, each with what
	// it was made of (see cluster).
	clusters map[ClusterKey]*memoCluster
}

// memoCluster is a cluster a Build made, with the objects it read to make it.
type memoCluster struct {
	cluster *Cluster
	svc     *corev1.Service
	// slices are the Service's EndpointSlices, in no order.
	slices []*discoveryv1.EndpointSlice
	trust  bool
	build  uint64
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
	// built is the HTTPRoute the last Build made of the route, which a Build of the same
	// parents generation hands on as it is while the route is not marked (see reuse); nil when
	// it may not be.
	built *HTTPRoute
	// attachments are built's attachments as reuse made them, one per listener of parents'
	// attached in their order; nil until a reuse made them.
	attachments []*Attachment
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
		clusterUses: map[ClusterKey]int{}, clusters: map[ClusterKey]*memoCluster{},
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
	clear(m.clusters)
	m.parentsGen++
	m.keys, m.entries, m.sorted = nil, nil, false
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
				m.entries = slices.Insert(m.entries, i, nil)
			case !exists && found:
				m.keys = slices.Delete(m.keys, i, i+1)
				m.entries = slices.Delete(m.entries, i, i+1)
			}
		}
	}
	// A count that differs means a route changed without RouteChanged: sort from scratch rather
	// than leave it out.
	if !m.sorted || len(m.keys) != len(b.cs.HTTPRoutes) {
		m.keys, m.sorted, m.resorted = sortedKeys(b.cs.HTTPRoutes), true, true
		m.entries = make([]*memoRoute, len(m.keys))
		for i, key := range m.keys {
			m.entries[i] = m.routes[key]
		}
	}
	return m.keys
}

// isDirty reports whether a route is marked changed. With few marked, as after an edit, it
// compares key with each of them rather than hashing it: it runs for every route of a Build.
func (m *RouteMemo) isDirty(key types.NamespacedName, few []types.NamespacedName) bool {
	if len(m.dirty) > len(few) {
		return m.dirty[key]
	}
	return slices.Contains(few, key)
}

// fewDirty lists the routes marked changed when there are few, for isDirty.
func (m *RouteMemo) fewDirty() []types.NamespacedName {
	if len(m.dirty) > FewMarks {
		return nil
	}
	out := make([]types.NamespacedName, 0, len(m.dirty))
	for key := range m.dirty {
		out = append(out, key)
	}
	return out
}

// FewMarks is the most routes marked changed that a walk over every route (of a Build, or of a
// virtual host in snapshot's compile memo) compares with each key one by one; with more, it
// looks each key up in the marks.
const FewMarks = 8

// reuse attaches r, the HTTPRoute the last Build made of a route that has not changed since and
// whose parents the memo holds for this generation, to this Build's listeners as it attached
// then, and reports whether it could (nothing attached when not). The route, its rules and its
// parents are the very values of the Builds before, shared with their graphs: a Build that
// reuses routes must not modify them, so reuse is only for Builds in which nothing does (see
// buildHTTPRoutes). Each Parent keeps the Gateway (or ListenerSet) value of the Build that made
// it: the same object version, as parents are only replayed while no Gateway changed.
func (b *builder) reuse(r *HTTPRoute, mr *memoRoute, atts *arena[Attachment]) bool {
	for i := range mr.parents {
		ls, ok := b.memoListeners(&mr.parents[i])
		if !ok {
			return false
		}
		for _, a := range mr.parents[i].attached {
			if a.index >= len(ls) {
				return false
			}
		}
	}
	made := mr.attachments == nil
	n := 0
	for i := range mr.parents {
		ls, _ := b.memoListeners(&mr.parents[i])
		for _, a := range mr.parents[i].attached {
			if made {
				att := atts.next()
				att.Route, att.Hostnames = r, a.hostnames
				mr.attachments = append(mr.attachments, att)
			}
			ls[a.index].addAttachment(mr.attachments[n])
			n++
		}
	}
	return true
}

// memoListeners returns this Build's listeners a memo parent's attachments index: those of its
// Gateway, or of its ListenerSet (none when the set is not accepted), as Parent.listeners.
func (b *builder) memoListeners(mp *memoParent) ([]*Listener, bool) {
	if mp.set {
		ls, ok := b.listenerSets[mp.gateway]
		if !ok {
			return nil, false
		}
		if !ls.Accepted {
			return nil, true
		}
		return ls.Listeners, true
	}
	gw := b.gatewayAt(mp.index, mp.gateway)
	if gw == nil {
		return nil, false
	}
	return gw.Listeners, true
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
	m := b.opts.Routes
	if m == nil {
		return
	}
	m.build++
	drop := func(key types.NamespacedName, mr *memoRoute) {
		if mr.build != m.build {
			m.count(mr, nil)
			delete(m.routes, key)
		}
	}
	if m.resorted {
		for key, mr := range m.routes {
			drop(key, mr)
		}
	} else {
		// Every key was visited; an entry without one is a route deleted, which is marked.
		for key := range m.dirty {
			if mr, ok := m.routes[key]; ok {
				drop(key, mr)
			}
		}
	}
	m.resorted = false
	clear(m.dirty)
	for k := range m.clusterUses {
		b.clusters[k] = true
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

// cluster returns the cluster the last Build made of key when it read the very objects this
// Build would (the Service, the same EndpointSlices, the same options) and no BackendTLSPolicy
// selects it; nil otherwise, and without a memo. Objects are replaced, never modified, when they
// change, so the same objects make the same cluster: its endpoints are not read again.
func (m *RouteMemo) cluster(b *builder, key ClusterKey, svc *corev1.Service, grpc bool, policy *BackendTLSPolicy) *Cluster {
	if m == nil || policy != nil {
		return nil
	}
	mc := m.clusters[key]
	if mc == nil || mc.svc != svc || mc.cluster.GRPC != grpc || mc.trust != b.opts.TrustAnyEndpointSlice {
		return nil
	}
	keys := b.slices[types.NamespacedName{Namespace: key.Namespace, Name: key.Name}]
	if len(keys) != len(mc.slices) {
		return nil
	}
	for _, k := range keys {
		if !slices.Contains(mc.slices, b.cs.EndpointSlices[k]) {
			return nil
		}
	}
	mc.build = m.build
	return mc.cluster
}

// keepCluster remembers a cluster this Build made, unless a BackendTLSPolicy selects it.
func (m *RouteMemo) keepCluster(b *builder, c *Cluster, svc *corev1.Service, policy *BackendTLSPolicy) {
	if m == nil {
		return
	}
	if policy != nil {
		delete(m.clusters, c.Key)
		return
	}
	keys := b.slices[types.NamespacedName{Namespace: c.Key.Namespace, Name: c.Key.Name}]
	objs := make([]*discoveryv1.EndpointSlice, len(keys))
	for i, k := range keys {
		objs[i] = b.cs.EndpointSlices[k]
	}
	m.clusters[c.Key] = &memoCluster{cluster: c, svc: svc, slices: objs, trust: b.opts.TrustAnyEndpointSlice, build: m.build}
}

// sweepClusters forgets the clusters this Build did not use.
func (m *RouteMemo) sweepClusters() {
	if m == nil {
		return
	}
	for key, mc := range m.clusters {
		if mc.build != m.build {
			delete(m.clusters, key)
		}
	}
}
