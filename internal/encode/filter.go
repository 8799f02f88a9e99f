package encode

import (
	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/internal/snapshot"
)

func filter(f snapshot.Filter) *discoveryv1.Filter {
	switch {
	case f.RequestHeaders != nil:
		return &discoveryv1.Filter{Kind: &discoveryv1.Filter_RequestHeaders{RequestHeaders: headerModifier(f.RequestHeaders)}}
	case f.ResponseHeaders != nil:
		return &discoveryv1.Filter{Kind: &discoveryv1.Filter_ResponseHeaders{ResponseHeaders: headerModifier(f.ResponseHeaders)}}
	case f.Redirect != nil:
		return &discoveryv1.Filter{Kind: &discoveryv1.Filter_Redirect{Redirect: redirect(f.Redirect)}}
	case f.Rewrite != nil:
		rw := &discoveryv1.Rewrite{Hostname: f.Rewrite.Hostname, Path: pathModifier(f.Rewrite.Path)}
		return &discoveryv1.Filter{Kind: &discoveryv1.Filter_Rewrite{Rewrite: rw}}
	case f.Mirror != nil:
		m := &discoveryv1.Mirror{
			Cluster: f.Mirror.Cluster, Numerator: uint32(f.Mirror.Numerator), Denominator: uint32(f.Mirror.Denominator), //nolint:gosec // validated non-negative
		}
		return &discoveryv1.Filter{Kind: &discoveryv1.Filter_Mirror{Mirror: m}}
	case f.CORS != nil:
		return &discoveryv1.Filter{Kind: &discoveryv1.Filter_Cors{Cors: cors(f.CORS)}}
	}
	return &discoveryv1.Filter{}
}

func cors(c *snapshot.CORS) *discoveryv1.Cors {
	return &discoveryv1.Cors{
		AllowOrigins:     c.AllowOrigins,
		AllowCredentials: c.AllowCredentials,
		AllowMethods:     c.AllowMethods,
		AllowHeaders:     c.AllowHeaders,
		ExposeHeaders:    c.ExposeHeaders,
		MaxAgeSeconds:    uint32(c.MaxAge), //nolint:gosec // validated non-negative
	}
}

func headerModifier(m *snapshot.HeaderModifier) *discoveryv1.HeaderModifier {
	return &discoveryv1.HeaderModifier{Set: headers(m.Set), Add: headers(m.Add), Remove: m.Remove}
}

func headers(in []snapshot.Header) []*discoveryv1.Header {
	var out []*discoveryv1.Header
	for _, h := range in {
		out = append(out, &discoveryv1.Header{Name: h.Name, Value: h.Value})
	}
	return out
}

func redirect(r *snapshot.Redirect) *discoveryv1.Redirect {
	return &discoveryv1.Redirect{
		Scheme:     r.Scheme,
		Hostname:   r.Hostname,
		Port:       uint32(r.Port), //nolint:gosec // ports are 1-65535
		Path:       pathModifier(r.Path),
		StatusCode: uint32(r.StatusCode), //nolint:gosec // validated redirect codes
	}
}

func pathModifier(p *snapshot.PathModifier) *discoveryv1.PathModifier {
	switch {
	case p == nil:
		return nil
	case p.Type == snapshot.PathReplaceFull:
		return &discoveryv1.PathModifier{Kind: &discoveryv1.PathModifier_ReplaceFullPath{ReplaceFullPath: p.Value}}
	}
	return &discoveryv1.PathModifier{Kind: &discoveryv1.PathModifier_ReplacePrefixMatch{ReplacePrefixMatch: p.Value}}
}
