package graph

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/internal/graph/conditions"
	"coxswain.dev/coxswain/internal/state"
)

// HTTPRoute is an HTTPRoute, or a GRPCRoute resolved as one (see grpcAsHTTPRoute), with at
// least one parentRef to one of our Gateways.
type HTTPRoute struct {
	// Source is the HTTPRoute; for a GRPCRoute, the HTTPRoute that routes the same requests.
	Source *gwapiv1.HTTPRoute
	// GRPC is the GRPCRoute the route was resolved from; nil for an HTTPRoute.
	GRPC *gwapiv1.GRPCRoute
	// TLS is the TLSRoute the route was resolved from; nil for an HTTPRoute.
	TLS *gwapiv1.TLSRoute
	// TCP is the TCPRoute the route was resolved from; nil for an HTTPRoute.
	TCP *gwapiv1.TCPRoute
	// UDP is the UDPRoute the route was resolved from; nil for an HTTPRoute.
	UDP *gwapiv1.UDPRoute
	// Rules are the validated rules, with matches defaulted and references resolved.
	Rules []*Rule
	// Parents are the route's parentRefs that name our Gateways, in spec order.
	Parents []*Parent
	// invalid is the route-wide reason not to accept it (UnsupportedValue...), or nil.
	invalid *metav1.Condition
	// resolvedRefs is the route-wide ResolvedRefs condition when a reference failed; nil when
	// every reference resolved (see refs).
	resolvedRefs *metav1.Condition
	// id is ID's result, kept by a RouteMemo; empty when not computed yet.
	id string
	// wire is wireBytes's result, kept with the route.
	wire wireEstimate
}

// Parent is one parentRef of a route to one of our Gateways, with its computed conditions.
type Parent struct {
	Ref gwapiv1.ParentReference
	// Gateway is the Gateway as the Build that resolved the parent made it. A route a RouteMemo
	// hands on keeps the Gateway of an earlier Build: the same object version, but its listeners
	// hold that Build's attachments, so only the Build that made a Parent may read them.
	Gateway    *Gateway
	Accepted   bool
	Conditions []metav1.Condition
	// Set is the ListenerSet the parentRef names; nil for a parentRef to a Gateway.
	Set *ListenerSet
}

// Rule is a validated route rule.
type Rule struct {
	Index int
	// Matches has at least one entry; a missing path is defaulted to PathPrefix "/".
	Matches  []gwapiv1.HTTPRouteMatch
	Filters  []Filter
	Backends []Backend
	Timeouts Timeouts
	// Retry is the rule's retry stanza, nil when it has none or sets attempts to 0.
	Retry *Retry
}

// Retry is a rule's parsed retry stanza. Attempts is the most retries
// after the first attempt; Backoff is nil when unset.
type Retry struct {
	Codes    []int
	Attempts int
	Backoff  *metav1.Duration
}

// Filter is a supported rule filter; Mirror is set for a resolved RequestMirror.
type Filter struct {
	gwapiv1.HTTPRouteFilter
	Mirror *Backend
}

// Timeouts are a rule's parsed timeouts; nil means not set, zero means disabled.
type Timeouts struct {
	Request        *metav1.Duration
	BackendRequest *metav1.Duration
}

// Key returns the route's namespace/name. An HTTPRoute and a GRPCRoute may share it; ID
// tells them apart.
func (r *HTTPRoute) Key() types.NamespacedName {
	return state.Key(r.Source)
}

// Route kinds.
const (
	KindHTTPRoute = "HTTPRoute"
	KindGRPCRoute = "GRPCRoute"
	KindTLSRoute  = "TLSRoute"
	KindTCPRoute  = "TCPRoute"
	KindUDPRoute  = "UDPRoute"
)

// Kind returns the route's kind: KindHTTPRoute, KindGRPCRoute, KindTLSRoute, KindTCPRoute or
// KindUDPRoute.
func (r *HTTPRoute) Kind() string {
	switch {
	case r.GRPC != nil:
		return KindGRPCRoute
	case r.TLS != nil:
		return KindTLSRoute
	case r.TCP != nil:
		return KindTCPRoute
	case r.UDP != nil:
		return KindUDPRoute
	}
	return KindHTTPRoute
}

// refs returns the route-wide ResolvedRefs condition.
func (r *HTTPRoute) refs() metav1.Condition {
	if r.resolvedRefs == nil {
		return conditions.NewRouteResolvedRefs()
	}
	return *r.resolvedRefs
}

// ID returns what names the route among the routes of every kind: "<namespace>/<name>" for an
// HTTPRoute, "grpc:<namespace>/<name>" for a GRPCRoute, "tls:<namespace>/<name>" for a
// TLSRoute, "tcp:<namespace>/<name>" for a TCPRoute, "udp:<namespace>/<name>" for a UDPRoute
// (a namespace never holds a colon).
func (r *HTTPRoute) ID() string {
	if r.id != "" {
		return r.id
	}
	switch {
	case r.GRPC != nil:
		return "grpc:" + r.Key().String()
	case r.TLS != nil:
		return "tls:" + r.Key().String()
	case r.TCP != nil:
		return "tcp:" + r.Key().String()
	case r.UDP != nil:
		return "udp:" + r.Key().String()
	}
	return r.Key().String()
}

func (b *builder) buildHTTPRoutes() []*HTTPRoute {
	keys := b.routeKeys()
	out := make([]*HTTPRoute, 0, len(keys))
	m := b.opts.Routes
	// Routes of the Builds before are handed on as they are only while no GRPCRoute may take a
	// listener from one (refuseKindConflicts modifies the losers' parents).
	reusable := m != nil && len(b.cs.GRPCRoutes) == 0
	var few []types.NamespacedName
	if m != nil {
		few = m.fewDirty()
	}
	// What a build makes for a route, in few allocations for all of them (see routeBlock).
	blocks := arena[routeBlock]{want: len(keys)}
	atts := arena[Attachment]{want: len(keys)}
	for i, key := range keys {
		if reusable && !m.isDirty(key, few) {
			if mr := m.entries[i]; mr != nil && mr.parentsGen == m.parentsGen && mr.hasParents {
				if len(mr.parents) == 0 {
					mr.build = m.build + 1
					continue // none of its parentRefs names one of our Gateways, and none was counted
				}
				if r := mr.built; r != nil && b.reuse(r, mr, &atts) {
					mr.build = m.build + 1
					out = append(out, r)
					continue
				}
			}
		}
		src, ok := b.cs.HTTPRoutes[key]
		if !ok {
			continue
		}
		mr, usable := b.memoOf(key)
		if m != nil {
			m.entries[i] = mr
			mr.built, mr.attachments = nil, nil
		}
		blk := blocks.next()
		r := &blk.route
		r.Source = src
		if mr != nil {
			if mr.id == "" {
				mr.id = r.ID()
			}
			r.id = mr.id
		}
		if usable && mr.hasParents && len(mr.parents) == 0 && mr.parentsGen == b.opts.Routes.parentsGen {
			continue // none of its parentRefs names one of our Gateways, and none was counted
		}
		if usable && mr.rules != nil && b.replayParents(r, mr, blk) {
			b.rules(r, mr, true)
			out = append(out, r)
			if reusable {
				mr.built = r
			}
			continue
		}
		parents := b.ourParents(src)
		if len(parents) == 0 {
			b.recordParents(r, mr, nil, nil)
			if mr != nil {
				b.opts.Routes.count(mr, nil)
			}
			continue
		}
		r.Parents = parents
		b.rules(r, mr, usable)
		attached := make([][]listenerAttachment, len(parents))
		for i, p := range parents {
			attached[i] = b.attach(r, p)
		}
		b.recordParents(r, mr, parents, attached)
		out = append(out, r)
		if reusable {
			mr.built = r
		}
	}
	b.finishRoutes()
	return out
}

// arena hands out values of T from chunks allocated for many at once: a Build makes one or a
// few per route, and they live and go with its graph. Chunks double from 16 to 1,024 values, so
// that a Build that makes few (reusing the others) allocates little.
type arena[T any] struct {
	// want is how many values the Build may still ask for, which bounds a chunk.
	want  int
	chunk int
	free  []T
}

func (a *arena[T]) next() *T {
	if len(a.free) == 0 {
		a.chunk = min(max(16, 2*a.chunk), 1024)
		a.free = make([]T, max(1, min(a.chunk, a.want)))
	}
	v := &a.free[0]
	a.free = a.free[1:]
	a.want--
	return v
}

// routeBlock holds a route of a build with the parent, the parent list and the attachment of a
// route with one parent that attaches to one listener, the common case: one piece of the
// build's one allocation for all its routes instead of four allocations per route. A graph is
// dropped whole, so no piece outlives the others for long.
type routeBlock struct {
	route   HTTPRoute
	parent  Parent
	parents [1]*Parent
	att     Attachment
}

// stampRoutes sets the observedGeneration of every parent condition of routes. A condition
// stamped already is not written: those of a RouteMemo are shared with earlier graphs, which
// the status writer may be reading.
func stampRoutes(routes []*HTTPRoute) {
	for _, r := range routes {
		gen := r.Source.Generation
		for _, p := range r.Parents {
			for i := range p.Conditions {
				if p.Conditions[i].ObservedGeneration != gen {
					p.Conditions[i].ObservedGeneration = gen
				}
			}
		}
	}
}

// ourParents returns the parentRefs that name one of our Gateways, without duplicates.
// References to other kinds or to Gateways we do not serve are left to their controllers.
func (b *builder) ourParents(src *gwapiv1.HTTPRoute) []*Parent {
	var out []*Parent
	var seen []parentKey // routes have few parentRefs
	for _, ref := range src.Spec.ParentRefs {
		if isListenerSetRef(ref) {
			out = b.appendSetParent(out, &seen, src.Namespace, ref)
			continue
		}
		if (ref.Group != nil && *ref.Group != gwapiv1.GroupName) || (ref.Kind != nil && *ref.Kind != kindGateway) {
			continue
		}
		key := types.NamespacedName{Namespace: src.Namespace, Name: string(ref.Name)}
		if ref.Namespace != nil {
			key.Namespace = string(*ref.Namespace)
		}
		gw, ok := b.gateways[key]
		id := parentID(key, ref)
		if !ok || slices.Contains(seen, id) {
			continue
		}
		seen = append(seen, id)
		out = append(out, &Parent{Ref: ref, Gateway: gw})
	}
	return out
}

// parentKey identifies a parentRef: its Gateway (or ListenerSet), sectionName and port.
type parentKey struct {
	listenerSet bool
	gateway     types.NamespacedName
	section     gwapiv1.SectionName
	port        gwapiv1.PortNumber
}

func parentID(gw types.NamespacedName, ref gwapiv1.ParentReference) parentKey {
	id := parentKey{gateway: gw}
	if ref.SectionName != nil {
		id.section = *ref.SectionName
	}
	if ref.Port != nil {
		id.port = *ref.Port
	}
	return id
}
