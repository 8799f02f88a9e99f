package router

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
)

// maxPattern bounds a regular expression's source, so a hostile set cannot make compiling
// expensive.
const maxPattern = 4096

func (c *compiler) route(in *discoveryv1.Route) (*Route, error) {
	out := &Route{Name: in.GetName(), hostname: strings.ToLower(in.GetHostname()), method: in.GetMatch().GetMethod()}
	if out.Name == "" {
		return nil, fmt.Errorf("%w: route without a name", ErrInvalid)
	}
	steps := []func() error{
		func() error { return checkHostname(out.hostname) },
		func() error { return out.compileMatch(in.GetMatch()) },
		func() error { return c.compileFilters(out, in.GetFilters()) },
		func() error { return c.compileBackends(out, in.GetBackends()) },
		func() error { return out.compileTimeouts(in.GetTimeouts()) },
		func() error { return out.compileRetry(in.GetRetry()) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, fmt.Errorf("route %s: %w", out.Name, err)
		}
	}
	if in.GetDirectStatus() != 0 {
		if !validStatus(in.GetDirectStatus()) {
			return nil, fmt.Errorf("route %s: %w: direct status %d", out.Name, ErrInvalid, in.GetDirectStatus())
		}
		out.DirectStatus = int(in.GetDirectStatus())
	}
	return out, nil
}

func validStatus(s uint32) bool { return s >= 100 && s <= 599 }

func (r *Route) compileMatch(in *discoveryv1.RouteMatch) error {
	p := in.GetPath()
	if p == nil {
		p = &discoveryv1.PathMatch{Type: discoveryv1.MatchType_MATCH_TYPE_PATH_PREFIX, Value: "/"}
	}
	path, err := compileValue(p.GetType(), "", p.GetValue(), true)
	if err != nil {
		return err
	}
	r.path = path
	for _, h := range in.GetHeaders() {
		v, err := compileValue(h.GetType(), strings.ToLower(h.GetName()), h.GetValue(), false)
		if err != nil {
			return fmt.Errorf("header %q: %w", h.GetName(), err)
		}
		r.headers = append(r.headers, v)
	}
	for _, q := range in.GetQueryParams() {
		v, err := compileValue(q.GetType(), q.GetName(), q.GetValue(), false)
		if err != nil {
			return fmt.Errorf("query parameter %q: %w", q.GetName(), err)
		}
		r.query = append(r.query, v)
	}
	return nil
}

func compileValue(t discoveryv1.MatchType, name, value string, isPath bool) (valueMatch, error) {
	out := valueMatch{name: name, value: value}
	if !isPath && name == "" {
		return out, fmt.Errorf("%w: empty name", ErrInvalid)
	}
	switch {
	case t == discoveryv1.MatchType_MATCH_TYPE_EXACT || t == discoveryv1.MatchType_MATCH_TYPE_UNSPECIFIED && !isPath:
		out.kind = MatchExact
		if isPath {
			out.value = canonicalValue(value)
		}
	case t == discoveryv1.MatchType_MATCH_TYPE_PATH_PREFIX && isPath:
		out.kind = MatchPrefix
		out.value = trimSlashes(canonicalValue(value))
	case t == discoveryv1.MatchType_MATCH_TYPE_REGULAR_EXPRESSION:
		return compileRegex(out, value)
	default:
		return out, fmt.Errorf("%w: match type %s", ErrInvalid, t)
	}
	if isPath && !strings.HasPrefix(value, "/") {
		return out, fmt.Errorf("%w: path %q does not start with /", ErrInvalid, value)
	}
	return out, nil
}

func compileRegex(out valueMatch, pattern string) (valueMatch, error) {
	if len(pattern) > maxPattern {
		return out, fmt.Errorf("%w: regular expression longer than %d bytes", ErrInvalid, maxPattern)
	}
	re, err := regexp.Compile("^(?:" + pattern + ")$")
	if err != nil {
		return out, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	out.kind, out.re = MatchRegex, re
	return out, nil
}

func (c *compiler) compileBackends(r *Route, in []*discoveryv1.WeightedBackend) error {
	for _, b := range in {
		if b.GetWeight() == 0 {
			continue
		}
		out := Backend{Weight: b.GetWeight()}
		if err := out.compileFilters(r, b.GetFilters()); err != nil {
			return err
		}
		switch cl, ok := c.table.clusterNames[b.GetCluster()]; {
		case b.GetErrorStatus() != 0:
			if !validStatus(b.GetErrorStatus()) {
				return fmt.Errorf("%w: backend error status %d", ErrInvalid, b.GetErrorStatus())
			}
			out.ErrorStatus = int(b.GetErrorStatus())
		case ok:
			out.Cluster = cl.ref
			if r.refs == nil {
				r.refs = cl.ref.names // shared; its capacity of one makes an append copy it
			} else {
				r.refs = append(r.refs, cl.Name)
			}
		default:
			out.ErrorStatus = 500
			r.refs = append(r.refs, b.GetCluster())
		}
		r.totalWeight += uint64(out.Weight)
		out.cumulative = r.totalWeight
		r.Backends = append(r.Backends, out)
	}
	return nil
}

// compileFilters compiles a backend's filters: header modifiers and one rewrite, since every
// other filter acts before a backend is chosen. A rewrite's prefix replacement replaces what
// r's PathPrefix match matched, as r's own rewrite does; r may not have a rewrite of its own,
// whose order with the backend's the control plane does not define.
func (b *Backend) compileFilters(r *Route, in []*discoveryv1.Filter) error {
	if len(in) == 0 {
		return nil
	}
	b.Filters = &BackendFilters{}
	for i, f := range in {
		var err error
		var m *HeaderModifier
		switch k := f.GetKind().(type) {
		case *discoveryv1.Filter_RequestHeaders:
			m, err = headerModifier(k.RequestHeaders)
			b.Filters.RequestHeaders = append(b.Filters.RequestHeaders, m)
		case *discoveryv1.Filter_ResponseHeaders:
			m, err = headerModifier(k.ResponseHeaders)
			b.Filters.ResponseHeaders = append(b.Filters.ResponseHeaders, m)
		case *discoveryv1.Filter_Rewrite:
			err = b.Filters.compileRewrite(r, k.Rewrite)
		default:
			err = fmt.Errorf("%w: a backend takes header modifiers and a rewrite only", ErrInvalid)
		}
		if err != nil {
			return fmt.Errorf("backend filter %d: %w", i, err)
		}
	}
	return nil
}

func (f *BackendFilters) compileRewrite(r *Route, in *discoveryv1.Rewrite) error {
	switch {
	case f.Rewrite != nil:
		return fmt.Errorf("%w: more than one rewrite", ErrInvalid)
	case r.Rewrite != nil:
		return fmt.Errorf("%w: a backend rewrite on a route with a rewrite", ErrInvalid)
	}
	rw, err := r.rewrite(in)
	f.Rewrite = rw
	return err
}

func (r *Route) compileTimeouts(in *discoveryv1.Timeouts) error {
	var err error
	if r.RequestTimeout, err = duration(in.GetRequest()); err != nil {
		return fmt.Errorf("request timeout: %w", err)
	}
	if r.BackendTimeout, err = duration(in.GetBackendRequest()); err != nil {
		return fmt.Errorf("backend timeout: %w", err)
	}
	return nil
}

func (r *Route) compileRetry(in *discoveryv1.Retry) error {
	if in == nil {
		return nil
	}
	if in.GetAttempts() < 1 {
		return fmt.Errorf("%w: retry attempts %d", ErrInvalid, in.GetAttempts())
	}
	out := &Retry{Attempts: int(min(in.GetAttempts(), MaxRetryAttempts))}
	for _, c := range in.GetCodes() {
		if c < 400 || c > 599 {
			return fmt.Errorf("%w: retry code %d", ErrInvalid, c)
		}
		i := c - 400
		out.codes[i/64] |= 1 << (i % 64)
	}
	out.Backoff = DefaultRetryBackoff
	if in.GetBackoff() != nil {
		var err error
		if out.Backoff, err = duration(in.GetBackoff()); err != nil {
			return fmt.Errorf("retry backoff: %w", err)
		}
	}
	r.Retry = out
	return nil
}

func duration(d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil || d.AsDuration() < 0 {
		return 0, fmt.Errorf("%w: duration %v", ErrInvalid, d)
	}
	return d.AsDuration(), nil
}
