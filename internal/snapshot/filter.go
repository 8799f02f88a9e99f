package snapshot

import (
	"slices"

	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/internal/graph"
)

// compileFilter compiles one validated filter; it returns false for a mirror whose backend did
// not resolve, which is dropped.
func (sb *scopeBuilder) compileFilter(f graph.Filter, l *graph.Listener) (Filter, bool) {
	out := Filter{Type: string(f.Type)}
	switch f.Type {
	case gwapiv1.HTTPRouteFilterRequestHeaderModifier:
		out.RequestHeaders = compileHeaders(f.RequestHeaderModifier)
	case gwapiv1.HTTPRouteFilterResponseHeaderModifier:
		out.ResponseHeaders = compileHeaders(f.ResponseHeaderModifier)
	case gwapiv1.HTTPRouteFilterRequestRedirect:
		out.Redirect = compileRedirect(f.RequestRedirect, l)
	case gwapiv1.HTTPRouteFilterURLRewrite:
		out.Rewrite = &Rewrite{Hostname: string(deref(f.URLRewrite.Hostname)), Path: compilePath(f.URLRewrite.Path)}
	case gwapiv1.HTTPRouteFilterRequestMirror:
		if f.Mirror == nil {
			return out, false
		}
		out.Mirror = sb.compileMirror(f.RequestMirror, f.Mirror.Cluster)
	case gwapiv1.HTTPRouteFilterCORS:
		out.CORS = compileCORS(f.CORS)
	}
	return out, true
}

// compileCORS copies the filter; a zero maxAge takes the CRD's default of 5 seconds.
func compileCORS(c *gwapiv1.HTTPCORSFilter) *CORS {
	out := &CORS{AllowCredentials: deref(c.AllowCredentials), MaxAge: c.MaxAge}
	for _, o := range c.AllowOrigins {
		out.AllowOrigins = append(out.AllowOrigins, string(o))
	}
	for _, m := range c.AllowMethods {
		out.AllowMethods = append(out.AllowMethods, string(m))
	}
	for _, h := range c.AllowHeaders {
		out.AllowHeaders = append(out.AllowHeaders, string(h))
	}
	for _, h := range c.ExposeHeaders {
		out.ExposeHeaders = append(out.ExposeHeaders, string(h))
	}
	if out.MaxAge == 0 {
		out.MaxAge = 5
	}
	return out
}

func compileHeaders(m *gwapiv1.HTTPHeaderFilter) *HeaderModifier {
	out := &HeaderModifier{Remove: slices.Clone(m.Remove)}
	for _, h := range m.Set {
		out.Set = append(out.Set, Header{Name: string(h.Name), Value: h.Value})
	}
	for _, h := range m.Add {
		out.Add = append(out.Add, Header{Name: string(h.Name), Value: h.Value})
	}
	return out
}

// compileRedirect resolves the scheme and port as the spec says: the listener's scheme when
// unset; the port when unset is the scheme's well-known port if a scheme was given, else the
// listener's port.
func compileRedirect(r *gwapiv1.HTTPRequestRedirectFilter, l *graph.Listener) *Redirect {
	out := &Redirect{
		Scheme:     listenerScheme(l.Protocol),
		Hostname:   string(deref(r.Hostname)),
		Port:       l.Port,
		Path:       compilePath(r.Path),
		StatusCode: 302,
	}
	if r.Scheme != nil {
		out.Scheme = *r.Scheme
		out.Port = wellKnownPort(out.Scheme, l.Port)
	}
	if r.Port != nil {
		out.Port = *r.Port
	}
	if r.StatusCode != nil {
		out.StatusCode = int32(*r.StatusCode) //nolint:gosec // validated: 301, 302, 303, 307 or 308
	}
	return out
}

func wellKnownPort(scheme string, fallback int32) int32 {
	switch scheme {
	case "http":
		return 80
	case "https":
		return 443
	}
	return fallback
}

func compilePath(p *gwapiv1.HTTPPathModifier) *PathModifier {
	if p == nil {
		return nil
	}
	if p.Type == gwapiv1.FullPathHTTPPathModifier {
		return &PathModifier{Type: PathReplaceFull, Value: deref(p.ReplaceFullPath)}
	}
	return &PathModifier{Type: PathReplacePrefix, Value: deref(p.ReplacePrefixMatch)}
}

// compileMirror turns percent or fraction into numerator/denominator; the default is all.
func (sb *scopeBuilder) compileMirror(m *gwapiv1.HTTPRequestMirrorFilter, cluster graph.ClusterKey) *Mirror {
	out := &Mirror{Cluster: sb.useCluster(cluster), Numerator: 100, Denominator: 100}
	switch {
	case m.Fraction != nil:
		out.Numerator = m.Fraction.Numerator
		if m.Fraction.Denominator != nil {
			out.Denominator = *m.Fraction.Denominator
		}
	case m.Percent != nil:
		out.Numerator = *m.Percent
	}
	return out
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
