package graph

import (
	"fmt"
	"regexp"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/internal/graph/conditions"
)

// buildRules validates every rule and resolves its references. The first unsupported value
// makes the whole route invalid; the first unresolved reference sets its ResolvedRefs.
func (b *builder) buildRules(r *HTTPRoute) {
	rules := make([]Rule, len(r.Source.Spec.Rules)) // one allocation for the route's rules
	if len(rules) > 0 {
		r.Rules = make([]*Rule, 0, len(rules))
	}
	for i, src := range r.Source.Spec.Rules {
		if r.invalid == nil {
			r.invalid = validateRule(i, src)
		}
		rule := &rules[i]
		rule.Index, rule.Matches = i, defaultMatches(src.Matches)
		rule.Timeouts, _ = parseTimeouts(src.Timeouts)
		rule.Retry, _ = parseRetry(src.Retry)
		rule.Filters = b.resolveFilters(r, src.Filters)
		rule.Backends = b.resolveBackends(r, src.BackendRefs)
		r.Rules = append(r.Rules, rule)
	}
}

// defaultMatches applies the CRD defaults: one match, and path PathPrefix "/". A match whose
// path the API server defaulted already (every stored object's) keeps its path; the result is
// read only, as the source is.
func defaultMatches(in []gwapiv1.HTTPRouteMatch) []gwapiv1.HTTPRouteMatch {
	if len(in) == 0 {
		in = []gwapiv1.HTTPRouteMatch{{}}
	}
	out := make([]gwapiv1.HTTPRouteMatch, len(in))
	for i, m := range in {
		out[i] = m
		if m.Path != nil && m.Path.Type != nil && m.Path.Value != nil {
			continue
		}
		path := gwapiv1.HTTPPathMatch{Type: ptr(gwapiv1.PathMatchPathPrefix), Value: ptr("/")}
		if m.Path != nil {
			if m.Path.Type != nil {
				path.Type = m.Path.Type
			}
			if m.Path.Value != nil {
				path.Value = m.Path.Value
			}
		}
		out[i].Path = &path
	}
	return out
}

// validateRule returns the Accepted condition that rejects a rule, or nil.
func validateRule(i int, rule gwapiv1.HTTPRouteRule) *metav1.Condition {
	unsupported := func(format string, args ...any) *metav1.Condition {
		return ptr(conditions.NewRouteUnsupportedValue(fmt.Sprintf("Rule %d: ", i) + fmt.Sprintf(format, args...)))
	}
	if _, err := parseRetry(rule.Retry); err != nil {
		return unsupported("%v", err)
	}
	// The field is deprecated in favour of the Backend resource (GEP-4894), but the CRDs still
	// have it, and a route that sets it must hear that it is not served.
	if rule.SessionPersistence != nil { //nolint:staticcheck // see above
		return unsupported("sessionPersistence is not supported")
	}
	for j := range rule.BackendRefs {
		if c := validateBackendFilters(i, j, rule); c != nil {
			return c
		}
	}
	if _, err := parseTimeouts(rule.Timeouts); err != nil {
		return unsupported("%v", err)
	}
	if msg := validateMatches(rule.Matches); msg != "" {
		return unsupported("%s", msg)
	}
	return validateFilters(i, rule)
}

func validateMatches(matches []gwapiv1.HTTPRouteMatch) string {
	for _, m := range matches {
		if m.Path != nil && m.Path.Type != nil && *m.Path.Type == gwapiv1.PathMatchRegularExpression {
			if msg := checkRegexp("path", deref(m.Path.Value)); msg != "" {
				return msg
			}
		}
		for _, h := range m.Headers {
			if h.Type != nil && *h.Type == gwapiv1.HeaderMatchRegularExpression {
				if msg := checkRegexp("header "+string(h.Name), h.Value); msg != "" {
					return msg
				}
			}
		}
		for _, q := range m.QueryParams {
			if q.Type != nil && *q.Type == gwapiv1.QueryParamMatchRegularExpression {
				if msg := checkRegexp("query parameter "+string(q.Name), q.Value); msg != "" {
					return msg
				}
			}
		}
	}
	return ""
}

// checkRegexp accepts the RE2 syntax that the proxy evaluates.
func checkRegexp(what, expr string) string {
	if _, err := regexp.Compile(expr); err != nil {
		return fmt.Sprintf("invalid %s regular expression: %v", what, err)
	}
	return ""
}

// parseTimeouts parses the rule timeouts (GEP-2257 durations); backendRequest may not exceed a
// non-zero request timeout.
func parseTimeouts(t *gwapiv1.HTTPRouteTimeouts) (Timeouts, error) {
	var out Timeouts
	if t == nil {
		return out, nil
	}
	var err error
	if out.Request, err = parseDuration("request", t.Request); err != nil {
		return Timeouts{}, err
	}
	if out.BackendRequest, err = parseDuration("backendRequest", t.BackendRequest); err != nil {
		return Timeouts{}, err
	}
	if out.Request != nil && out.BackendRequest != nil && out.Request.Duration != 0 &&
		(out.BackendRequest.Duration == 0 || out.BackendRequest.Duration > out.Request.Duration) {
		return Timeouts{}, fmt.Errorf("backendRequest timeout %s exceeds request timeout %s", out.BackendRequest.Duration, out.Request.Duration)
	}
	return out, nil
}

// DefaultRetryAttempts is the number of retries of a retry stanza without attempts.
const DefaultRetryAttempts = 1

// parseRetry parses a rule's retry stanza. The CRD bounds codes to 400-599 and attempts to at
// least 0; the bounds are checked again because the graph also reads objects the API server
// did not validate (tests, older CRDs). An explicit attempts of 0 disables retries for the
// rule, as the spec requires: the rule then has no retry at all (nil).
func parseRetry(r *gwapiv1.HTTPRouteRetry) (*Retry, error) {
	if r == nil {
		return nil, nil
	}
	out := &Retry{Attempts: DefaultRetryAttempts}
	for _, c := range r.Codes {
		if c < 400 || c > 599 {
			return nil, fmt.Errorf("retry code %d is outside 400-599", c)
		}
		out.Codes = append(out.Codes, int(c))
	}
	slices.Sort(out.Codes)
	out.Codes = slices.Compact(out.Codes)
	if r.Attempts != nil {
		if *r.Attempts < 0 {
			return nil, fmt.Errorf("retry attempts %d is negative", *r.Attempts)
		}
		out.Attempts = *r.Attempts
	}
	if r.Backoff != nil {
		v, err := time.ParseDuration(string(*r.Backoff))
		if err != nil || v < 0 {
			return nil, fmt.Errorf("invalid retry backoff %q", *r.Backoff)
		}
		out.Backoff = &metav1.Duration{Duration: v}
	}
	if out.Attempts == 0 {
		return nil, nil
	}
	return out, nil
}

func parseDuration(name string, d *gwapiv1.Duration) (*metav1.Duration, error) {
	if d == nil {
		return nil, nil
	}
	v, err := time.ParseDuration(string(*d))
	if err != nil || v < 0 {
		return nil, fmt.Errorf("invalid %s timeout %q", name, *d)
	}
	return &metav1.Duration{Duration: v}, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
