package graph

import (
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/internal/graph/conditions"
)

// A TLSRoute is resolved as the HTTPRoute of the same parents, hostnames and backends, with one
// rule that matches everything: on a TLS passthrough listener the proxy picks the route by the
// ClientHello's server name as it picks an HTTP route by the Host, and uses only its backends.
// TLSRoutes attach only to TLS listeners (their supportedKinds), and HTTPRoutes and GRPCRoutes
// never to those.

// tlsAsHTTPRoute returns the HTTPRoute that routes the connections src routes. Its metadata is
// src's, so conditions and precedence read it as they read src; its status is left empty.
func tlsAsHTTPRoute(src *gwapiv1.TLSRoute) *gwapiv1.HTTPRoute {
	out := &gwapiv1.HTTPRoute{ObjectMeta: src.ObjectMeta}
	out.Spec.ParentRefs = src.Spec.ParentRefs
	out.Spec.Hostnames = src.Spec.Hostnames
	out.Spec.Rules = make([]gwapiv1.HTTPRouteRule, 0, len(src.Spec.Rules))
	for _, rule := range src.Spec.Rules {
		hr := gwapiv1.HTTPRouteRule{Name: rule.Name}
		for _, ref := range rule.BackendRefs {
			hr.BackendRefs = append(hr.BackendRefs, gwapiv1.HTTPBackendRef{BackendRef: ref})
		}
		out.Spec.Rules = append(out.Spec.Rules, hr)
	}
	return out
}

func (b *builder) buildTLSRoutes() []*HTTPRoute {
	var out []*HTTPRoute
	for _, key := range sortedKeys(b.cs.TLSRoutes) {
		tls := b.cs.TLSRoutes[key]
		src := tlsAsHTTPRoute(tls)
		parents := b.ourParents(src)
		if len(parents) == 0 {
			continue
		}
		r := &HTTPRoute{Source: src, TLS: tls, Parents: parents, resolvedRefs: conditions.NewRouteResolvedRefs()}
		// A TLSRoute's rules are resolved on every Build: the rule memo holds HTTPRoutes.
		b.buildRules(r)
		for _, p := range parents {
			b.attach(r, p)
		}
		out = append(out, r)
	}
	return out
}

// A TCPRoute is resolved as a TLSRoute without hostnames is: on a TCP listener the proxy hands
// every connection to the first route (the oldest), and the others attach but get none.

// tcpAsHTTPRoute returns the HTTPRoute that routes the connections src routes.
func tcpAsHTTPRoute(src *gwapiv1.TCPRoute) *gwapiv1.HTTPRoute {
	out := &gwapiv1.HTTPRoute{ObjectMeta: src.ObjectMeta}
	out.Spec.ParentRefs = src.Spec.ParentRefs
	out.Spec.Rules = make([]gwapiv1.HTTPRouteRule, 0, len(src.Spec.Rules))
	for _, rule := range src.Spec.Rules {
		hr := gwapiv1.HTTPRouteRule{Name: rule.Name}
		for _, ref := range rule.BackendRefs {
			hr.BackendRefs = append(hr.BackendRefs, gwapiv1.HTTPBackendRef{BackendRef: ref})
		}
		out.Spec.Rules = append(out.Spec.Rules, hr)
	}
	return out
}

func (b *builder) buildTCPRoutes() []*HTTPRoute {
	var out []*HTTPRoute
	for _, key := range sortedKeys(b.cs.TCPRoutes) {
		tcp := b.cs.TCPRoutes[key]
		src := tcpAsHTTPRoute(tcp)
		parents := b.ourParents(src)
		if len(parents) == 0 {
			continue
		}
		r := &HTTPRoute{Source: src, TCP: tcp, Parents: parents, resolvedRefs: conditions.NewRouteResolvedRefs()}
		b.buildRules(r)
		for _, p := range parents {
			b.attach(r, p)
		}
		out = append(out, r)
	}
	return out
}
