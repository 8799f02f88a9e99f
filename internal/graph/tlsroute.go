package graph

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// A TLSRoute is resolved as the HTTPRoute of the same parents, hostnames and backends, with one
// rule that matches everything: on a TLS passthrough listener the proxy picks the route by the
// ClientHello's server name as it picks an HTTP route by the Host, and uses only its backends.
// TLSRoutes attach only to TLS listeners (their supportedKinds), and HTTPRoutes and GRPCRoutes
// never to those.

// tlsAsHTTPRoute returns the HTTPRoute that routes the connections src routes. Its metadata is
// src's, so conditions and precedence read it as they read src; its status is left empty.
func tlsAsHTTPRoute(src *gwapiv1.TLSRoute) *gwapiv1.HTTPRoute {
	out := streamAsHTTPRoute(src.ObjectMeta, src.Spec.ParentRefs, src.Spec.Rules, func(r gwapiv1.TLSRouteRule) (*gwapiv1.SectionName, []gwapiv1.BackendRef) {
		return r.Name, r.BackendRefs
	})
	out.Spec.Hostnames = src.Spec.Hostnames
	return out
}

func (b *builder) buildTLSRoutes() []*HTTPRoute {
	return buildRoutesOf(b, b.cs.TLSRoutes, func(src *gwapiv1.TLSRoute) *HTTPRoute {
		return &HTTPRoute{Source: tlsAsHTTPRoute(src), TLS: src}
	})
}

// A TCPRoute is resolved as a TLSRoute without hostnames is: on a TCP listener the proxy hands
// every connection to the first route (the oldest), and the others attach but get none. A
// UDPRoute is the same on a UDP listener, for datagrams.

// tcpAsHTTPRoute returns the HTTPRoute that routes the connections src routes.
func tcpAsHTTPRoute(src *gwapiv1.TCPRoute) *gwapiv1.HTTPRoute {
	return streamAsHTTPRoute(src.ObjectMeta, src.Spec.ParentRefs, src.Spec.Rules, func(r gwapiv1.TCPRouteRule) (*gwapiv1.SectionName, []gwapiv1.BackendRef) {
		return r.Name, r.BackendRefs
	})
}

// udpAsHTTPRoute returns the HTTPRoute that routes the datagrams src routes: a UDPRoute is
// resolved as a TCPRoute is.
func udpAsHTTPRoute(src *gwapiv1.UDPRoute) *gwapiv1.HTTPRoute {
	return streamAsHTTPRoute(src.ObjectMeta, src.Spec.ParentRefs, src.Spec.Rules, func(r gwapiv1.UDPRouteRule) (*gwapiv1.SectionName, []gwapiv1.BackendRef) {
		return r.Name, r.BackendRefs
	})
}

// streamAsHTTPRoute returns the HTTPRoute of a route without hostnames or matches whose rules
// are named backends.
func streamAsHTTPRoute[R any](meta metav1.ObjectMeta, parents []gwapiv1.ParentReference, rules []R, rule func(R) (*gwapiv1.SectionName, []gwapiv1.BackendRef)) *gwapiv1.HTTPRoute {
	out := &gwapiv1.HTTPRoute{ObjectMeta: meta}
	out.Spec.ParentRefs = parents
	out.Spec.Rules = make([]gwapiv1.HTTPRouteRule, 0, len(rules))
	for _, r := range rules {
		name, refs := rule(r)
		hr := gwapiv1.HTTPRouteRule{Name: name}
		for _, ref := range refs {
			hr.BackendRefs = append(hr.BackendRefs, gwapiv1.HTTPBackendRef{BackendRef: ref})
		}
		out.Spec.Rules = append(out.Spec.Rules, hr)
	}
	return out
}

func (b *builder) buildTCPRoutes() []*HTTPRoute {
	return buildRoutesOf(b, b.cs.TCPRoutes, func(src *gwapiv1.TCPRoute) *HTTPRoute {
		return &HTTPRoute{Source: tcpAsHTTPRoute(src), TCP: src}
	})
}

func (b *builder) buildUDPRoutes() []*HTTPRoute {
	return buildRoutesOf(b, b.cs.UDPRoutes, func(src *gwapiv1.UDPRoute) *HTTPRoute {
		return &HTTPRoute{Source: udpAsHTTPRoute(src), UDP: src}
	})
}

// buildRoutesOf resolves the routes of one kind other than HTTPRoute, each made into the
// HTTPRoute that routes the same traffic by resolve (which may also find it invalid). Their
// rules are resolved on every Build: the rule memo holds HTTPRoutes.
func buildRoutesOf[R any](b *builder, routes map[types.NamespacedName]*R, resolve func(*R) *HTTPRoute) []*HTTPRoute {
	var out []*HTTPRoute
	for _, key := range sortedKeys(routes) {
		r := resolve(routes[key])
		r.Parents = b.ourParents(r.Source)
		if len(r.Parents) == 0 {
			continue
		}
		b.buildRules(r)
		for _, p := range r.Parents {
			b.attach(r, p)
		}
		out = append(out, r)
	}
	return out
}
