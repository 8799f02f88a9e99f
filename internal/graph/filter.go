package graph

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/graph/conditions"
)

var supportedFilters = map[gwapiv1.HTTPRouteFilterType]bool{
	gwapiv1.HTTPRouteFilterRequestHeaderModifier:  true,
	gwapiv1.HTTPRouteFilterResponseHeaderModifier: true,
	gwapiv1.HTTPRouteFilterRequestRedirect:        true,
	gwapiv1.HTTPRouteFilterURLRewrite:             true,
	gwapiv1.HTTPRouteFilterRequestMirror:          true,
	gwapiv1.HTTPRouteFilterCORS:                   true,
}

// backendFilters are the filter types a backendRef may carry: they act on the request and the
// response of one backend only, after the rule's filters. The spec makes every backendRef
// filter Extended; the others (redirect, mirror, CORS) act before a backend is chosen and are
// refused there.
var backendFilters = map[gwapiv1.HTTPRouteFilterType]bool{
	gwapiv1.HTTPRouteFilterRequestHeaderModifier:  true,
	gwapiv1.HTTPRouteFilterResponseHeaderModifier: true,
	gwapiv1.HTTPRouteFilterURLRewrite:             true,
}

var redirectCodes = map[int]bool{301: true, 302: true, 303: true, 307: true, 308: true}

// validateFilters rejects unsupported filter types and combinations that cannot apply together.
func validateFilters(i int, rule gwapiv1.HTTPRouteRule) *metav1.Condition {
	// The prefix is made only for a refusal: this runs for every rule at every build.
	prefix := func() string { return fmt.Sprintf("Rule %d: ", i) }
	seen := map[gwapiv1.HTTPRouteFilterType]bool{}
	for _, f := range rule.Filters {
		if !supportedFilters[f.Type] {
			return ptr(conditions.NewRouteUnsupportedValue(prefix() + fmt.Sprintf("filter %s is not supported", f.Type)))
		}
		if seen[f.Type] && f.Type != gwapiv1.HTTPRouteFilterRequestMirror {
			return ptr(conditions.NewRouteIncompatibleFilters(prefix() + fmt.Sprintf("filter %s is repeated", f.Type)))
		}
		seen[f.Type] = true
		if msg := validateFilter(f, rule.Matches); msg != "" {
			return ptr(conditions.NewRouteUnsupportedValue(prefix() + msg))
		}
	}
	redirect := seen[gwapiv1.HTTPRouteFilterRequestRedirect]
	if redirect && seen[gwapiv1.HTTPRouteFilterURLRewrite] {
		return ptr(conditions.NewRouteIncompatibleFilters(prefix() + "RequestRedirect and URLRewrite cannot be combined"))
	}
	if redirect && len(rule.BackendRefs) > 0 {
		return ptr(conditions.NewRouteIncompatibleFilters(prefix() + "RequestRedirect cannot be combined with backendRefs"))
	}
	return nil
}

func validateFilter(f gwapiv1.HTTPRouteFilter, matches []gwapiv1.HTTPRouteMatch) string {
	var path *gwapiv1.HTTPPathModifier
	switch f.Type {
	case gwapiv1.HTTPRouteFilterRequestRedirect:
		if f.RequestRedirect == nil {
			return "requestRedirect is missing"
		}
		if c := f.RequestRedirect.StatusCode; c != nil && !redirectCodes[*c] {
			return fmt.Sprintf("redirect status code %d is not supported", *c)
		}
		path = f.RequestRedirect.Path
	case gwapiv1.HTTPRouteFilterURLRewrite:
		if f.URLRewrite == nil {
			return "urlRewrite is missing"
		}
		path = f.URLRewrite.Path
	case gwapiv1.HTTPRouteFilterRequestHeaderModifier:
		if f.RequestHeaderModifier == nil {
			return "requestHeaderModifier is missing"
		}
		return validateHeaderFilter(f.RequestHeaderModifier)
	case gwapiv1.HTTPRouteFilterResponseHeaderModifier:
		if f.ResponseHeaderModifier == nil {
			return "responseHeaderModifier is missing"
		}
		return validateHeaderFilter(f.ResponseHeaderModifier)
	case gwapiv1.HTTPRouteFilterRequestMirror:
		return validateMirror(f.RequestMirror)
	case gwapiv1.HTTPRouteFilterCORS:
		return validateCORS(f.CORS)
	}
	return validatePathModifier(path, matches)
}

// validateBackendFilters accepts the header modifiers and the URLRewrite of backendRef j of
// rule, each at most once; any other type gets UnsupportedValue, as the spec asks of a filter
// an implementation does not support. A ReplacePrefixMatch replaces what the rule's PathPrefix
// matches matched, so it is checked against them as the rule's own URLRewrite is.
//
// A backend's URLRewrite in a rule that has one too is IncompatibleFilters: applied after the
// rule's, a backend's ReplacePrefixMatch would have to find the matched prefix in a path the
// rule already replaced, and which of the two hostnames or full paths wins would be a choice of
// ours that no user could read off the route. Refusing leaves room to define the combination
// later without changing what an accepted route does.
func validateBackendFilters(i, j int, rule gwapiv1.HTTPRouteRule) *metav1.Condition {
	prefix := func() string { return fmt.Sprintf("Rule %d: backendRef %d: ", i, j) }
	seen := map[gwapiv1.HTTPRouteFilterType]bool{}
	for _, f := range rule.BackendRefs[j].Filters {
		if !backendFilters[f.Type] {
			return ptr(conditions.NewRouteUnsupportedValue(prefix() + fmt.Sprintf("filter %s is not supported on a backendRef", f.Type)))
		}
		if seen[f.Type] {
			return ptr(conditions.NewRouteIncompatibleFilters(prefix() + fmt.Sprintf("filter %s is repeated", f.Type)))
		}
		seen[f.Type] = true
		if msg := validateFilter(f, rule.Matches); msg != "" {
			return ptr(conditions.NewRouteUnsupportedValue(prefix() + msg))
		}
	}
	if seen[gwapiv1.HTTPRouteFilterURLRewrite] && hasFilter(rule.Filters, gwapiv1.HTTPRouteFilterURLRewrite) {
		return ptr(conditions.NewRouteIncompatibleFilters(prefix() + "URLRewrite cannot be combined with the rule's URLRewrite"))
	}
	return nil
}

func hasFilter(filters []gwapiv1.HTTPRouteFilter, t gwapiv1.HTTPRouteFilterType) bool {
	for _, f := range filters {
		if f.Type == t {
			return true
		}
	}
	return false
}

// resolveBackendFilters keeps a backendRef's supported filters in spec order.
func resolveBackendFilters(in []gwapiv1.HTTPRouteFilter) []Filter {
	var out []Filter
	for _, f := range in {
		if backendFilters[f.Type] {
			out = append(out, Filter{HTTPRouteFilter: f})
		}
	}
	return out
}

// validateHeaderFilter refuses a header modifier that sets or adds a field the proxy frames
// the message or the connection with (wellknown.ReservedHeader); removing one is allowed.
func validateHeaderFilter(m *gwapiv1.HTTPHeaderFilter) string {
	for _, h := range append(append([]gwapiv1.HTTPHeader(nil), m.Set...), m.Add...) {
		if wellknown.ReservedHeader(string(h.Name)) {
			return fmt.Sprintf("header %s may not be set by a filter: the proxy sets it from the message it forwards", h.Name)
		}
	}
	return ""
}

func missing(isMissing bool, field string) string {
	if isMissing {
		return field + " is missing"
	}
	return ""
}

func validateMirror(m *gwapiv1.HTTPRequestMirrorFilter) string {
	if m == nil {
		return "requestMirror is missing"
	}
	if m.Percent != nil && (*m.Percent < 0 || *m.Percent > 100) {
		return fmt.Sprintf("mirror percent %d is out of range", *m.Percent)
	}
	if fr := m.Fraction; fr != nil {
		den := int32(100)
		if fr.Denominator != nil {
			den = *fr.Denominator
		}
		if den <= 0 || fr.Numerator < 0 || fr.Numerator > den {
			return fmt.Sprintf("mirror fraction %d/%d is out of range", fr.Numerator, den)
		}
	}
	return ""
}

// validatePathModifier requires ReplacePrefixMatch to follow PathPrefix matches only, since the
// matched prefix is what it replaces.
func validatePathModifier(path *gwapiv1.HTTPPathModifier, matches []gwapiv1.HTTPRouteMatch) string {
	if path == nil {
		return ""
	}
	switch path.Type {
	case gwapiv1.FullPathHTTPPathModifier:
		return missing(path.ReplaceFullPath == nil, "replaceFullPath")
	case gwapiv1.PrefixMatchHTTPPathModifier:
		if path.ReplacePrefixMatch == nil {
			return "replacePrefixMatch is missing"
		}
		for _, m := range defaultMatches(matches) {
			if *m.Path.Type != gwapiv1.PathMatchPathPrefix {
				return "ReplacePrefixMatch needs PathPrefix matches"
			}
		}
		return ""
	}
	return fmt.Sprintf("path modifier %s is not supported", path.Type)
}

// resolveFilters keeps the filters in spec order and resolves RequestMirror backends.
func (b *builder) resolveFilters(r *HTTPRoute, in []gwapiv1.HTTPRouteFilter) []Filter {
	out := make([]Filter, 0, len(in))
	for _, f := range in {
		if !supportedFilters[f.Type] {
			continue
		}
		filter := Filter{HTTPRouteFilter: f}
		if f.Type == gwapiv1.HTTPRouteFilterRequestMirror && f.RequestMirror != nil {
			backend := b.resolveBackend(r, f.RequestMirror.BackendRef, 1)
			if backend.Valid {
				filter.Mirror = &backend
			}
		}
		out = append(out, filter)
	}
	return out
}
