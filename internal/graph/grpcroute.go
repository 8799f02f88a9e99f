package graph

import (
	"fmt"
	"regexp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/internal/graph/conditions"
)

// A GRPCRoute is resolved as the HTTPRoute that routes the same requests: gRPC is HTTP/2 with
// the method in the path ("/<service>/<method>"), so a method match is a path match, a gRPC
// header match is a header match, and the GRPCRoute filters are HTTPRoute filters of the same
// types. The graph, the compiler and the proxy then need nothing of their own for it but three
// things the Kind of the route decides: its ReferenceGrants name GRPCRoute, its backends are
// spoken to over HTTP/2 (see Cluster.GRPC), and a listener's HTTPRoutes and GRPCRoutes never
// share a hostname (see refuseKindConflicts).
//
// Precedence is the spec's for GRPCRoutes, not the HTTPRoute order of their paths: the
// compiler orders GRPCRoute entries by the characters of the service, then of the method, then
// by header matches (snapshot.comparePrecedence), from the GRPCRoute kept in HTTPRoute.GRPC.

// grpcAsHTTPRoute returns the HTTPRoute that routes the requests src routes. Its metadata is
// src's (same name, namespace, generation and creation time), so conditions and precedence
// read it as they read src; its status is left empty.
func grpcAsHTTPRoute(src *gwapiv1.GRPCRoute) *gwapiv1.HTTPRoute {
	out := &gwapiv1.HTTPRoute{ObjectMeta: src.ObjectMeta}
	out.Spec.ParentRefs = src.Spec.ParentRefs
	out.Spec.Hostnames = src.Spec.Hostnames
	out.Spec.Rules = make([]gwapiv1.HTTPRouteRule, 0, len(src.Spec.Rules))
	for _, rule := range src.Spec.Rules {
		hr := gwapiv1.HTTPRouteRule{
			Name:               rule.Name,
			Filters:            grpcFilters(rule.Filters),
			SessionPersistence: rule.SessionPersistence, //nolint:staticcheck // refused by validateRule
		}
		for _, m := range rule.Matches {
			hr.Matches = append(hr.Matches, grpcMatch(m))
		}
		for _, ref := range rule.BackendRefs {
			hr.BackendRefs = append(hr.BackendRefs, gwapiv1.HTTPBackendRef{BackendRef: ref.BackendRef, Filters: grpcFilters(ref.Filters)})
		}
		out.Spec.Rules = append(out.Spec.Rules, hr)
	}
	return out
}

func grpcFilters(in []gwapiv1.GRPCRouteFilter) []gwapiv1.HTTPRouteFilter {
	if len(in) == 0 {
		return nil
	}
	out := make([]gwapiv1.HTTPRouteFilter, 0, len(in))
	for _, f := range in {
		out = append(out, gwapiv1.HTTPRouteFilter{
			// The GRPCRoute filter types are HTTPRoute filter types of the same name and meaning;
			// an unknown one stays unknown and is refused as unsupported.
			Type:                   gwapiv1.HTTPRouteFilterType(f.Type),
			RequestHeaderModifier:  f.RequestHeaderModifier,
			ResponseHeaderModifier: f.ResponseHeaderModifier,
			RequestMirror:          f.RequestMirror,
			ExtensionRef:           f.ExtensionRef,
		})
	}
	return out
}

// grpcMatch returns the HTTPRoute match of a GRPCRoute match.
func grpcMatch(m gwapiv1.GRPCRouteMatch) gwapiv1.HTTPRouteMatch {
	var out gwapiv1.HTTPRouteMatch
	if m.Method != nil {
		out.Path = grpcMethodPath(*m.Method)
	}
	for _, h := range m.Headers {
		t := gwapiv1.HeaderMatchExact
		if h.Type != nil && *h.Type == gwapiv1.GRPCHeaderMatchRegularExpression {
			t = gwapiv1.HeaderMatchRegularExpression
		}
		out.Headers = append(out.Headers, gwapiv1.HTTPHeaderMatch{Type: &t, Name: gwapiv1.HTTPHeaderName(h.Name), Value: h.Value})
	}
	return out
}

// grpcMethodPath returns the path match of a method match. The CRD requires a service or a
// method; with neither, every path matches (nil, the default "/" prefix).
func grpcMethodPath(m gwapiv1.GRPCMethodMatch) *gwapiv1.HTTPPathMatch {
	service, method := deref(m.Service), deref(m.Method)
	if service == "" && method == "" {
		return nil
	}
	if m.Type != nil && *m.Type == gwapiv1.GRPCMethodMatchRegularExpression {
		return grpcRegexPath(group(service), group(method))
	}
	switch {
	case method == "":
		return &gwapiv1.HTTPPathMatch{Type: ptr(gwapiv1.PathMatchPathPrefix), Value: ptr("/" + service)}
	case service == "":
		return grpcRegexPath(anyElement, regexp.QuoteMeta(method))
	default:
		return &gwapiv1.HTTPPathMatch{Type: ptr(gwapiv1.PathMatchExact), Value: ptr("/" + service + "/" + method)}
	}
}

// anyElement matches one path element: any service or any method.
const anyElement = "[^/]+"

// group makes a regular expression one operand of a concatenation; an empty one matches any
// path element.
func group(expr string) string {
	if expr == "" {
		return anyElement
	}
	return "(?:" + expr + ")"
}

// validateGRPCRoute checks what the HTTPRoute of a GRPCRoute no longer shows: each regular
// expression of a method match must be valid on its own, so that one cannot reach into the
// other's part of the path (a service "a)|(b" would compose into a valid but different
// expression).
func validateGRPCRoute(src *gwapiv1.GRPCRoute) *metav1.Condition {
	for i, rule := range src.Spec.Rules {
		for _, m := range rule.Matches {
			if m.Method == nil || m.Method.Type == nil || *m.Method.Type != gwapiv1.GRPCMethodMatchRegularExpression {
				continue
			}
			msg := checkRegexp("service", deref(m.Method.Service))
			if msg == "" {
				msg = checkRegexp("method", deref(m.Method.Method))
			}
			if msg != "" {
				return ptr(conditions.NewRouteUnsupportedValue(fmt.Sprintf("Rule %d: %s", i, msg)))
			}
		}
	}
	return nil
}

func grpcRegexPath(service, method string) *gwapiv1.HTTPPathMatch {
	return &gwapiv1.HTTPPathMatch{Type: ptr(gwapiv1.PathMatchRegularExpression), Value: ptr("/" + service + "/" + method)}
}

func (b *builder) buildGRPCRoutes() []*HTTPRoute {
	return buildRoutesOf(b, b.cs.GRPCRoutes, func(src *gwapiv1.GRPCRoute) *HTTPRoute {
		return &HTTPRoute{Source: grpcAsHTTPRoute(src), GRPC: src, invalid: validateGRPCRoute(src)}
	})
}
