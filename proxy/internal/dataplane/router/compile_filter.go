package router

import (
	"fmt"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/wellknown"
)

func (c *compiler) compileFilters(r *Route, in []*discoveryv1.Filter) error {
	for i, f := range in {
		if err := c.compileFilter(r, f); err != nil {
			return fmt.Errorf("filter %d: %w", i, err)
		}
	}
	return nil
}

func (c *compiler) compileFilter(r *Route, f *discoveryv1.Filter) error {
	switch k := f.GetKind().(type) {
	case *discoveryv1.Filter_RequestHeaders:
		m, err := headerModifier(k.RequestHeaders)
		r.RequestHeaders = append(r.RequestHeaders, m)
		return err
	case *discoveryv1.Filter_ResponseHeaders:
		m, err := headerModifier(k.ResponseHeaders)
		r.ResponseHeaders = append(r.ResponseHeaders, m)
		return err
	case *discoveryv1.Filter_Redirect:
		return r.compileRedirect(k.Redirect)
	case *discoveryv1.Filter_Rewrite:
		return r.compileRewrite(k.Rewrite)
	case *discoveryv1.Filter_Mirror:
		return c.compileMirror(r, k.Mirror)
	case *discoveryv1.Filter_Cors:
		if r.CORS != nil {
			return fmt.Errorf("%w: more than one CORS filter", ErrInvalid)
		}
		cors, err := compileCORS(k.Cors)
		r.CORS = cors
		return err
	}
	return fmt.Errorf("%w: filter without a kind", ErrInvalid)
}

func headerModifier(in *discoveryv1.HeaderModifier) (*HeaderModifier, error) {
	out := &HeaderModifier{Remove: in.GetRemove()}
	for _, h := range in.GetSet() {
		out.Set = append(out.Set, Header{Name: h.GetName(), Value: h.GetValue()})
	}
	for _, h := range in.GetAdd() {
		out.Add = append(out.Add, Header{Name: h.GetName(), Value: h.GetValue()})
	}
	for _, h := range append(out.Set, out.Add...) {
		if !validHeaderName(h.Name) || !validHeaderValue(h.Value) {
			return out, fmt.Errorf("%w: header %q", ErrInvalid, h.Name)
		}
		if wellknown.ReservedHeader(h.Name) {
			return out, fmt.Errorf("%w: header %q is the proxy's to set", ErrInvalid, h.Name)
		}
	}
	for _, name := range out.Remove {
		if !validHeaderName(name) {
			return out, fmt.Errorf("%w: header name %q", ErrInvalid, name)
		}
	}
	return out, nil
}

// validHeaderName accepts RFC 9110 tokens.
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c <= ' ' || c >= 0x7f || c == ':' || c == '"' || c == '(' || c == ')' || c == ',' ||
			c == '/' || c == ';' || c == '<' || c == '=' || c == '>' || c == '?' || c == '@' ||
			c == '[' || c == '\\' || c == ']' || c == '{' || c == '}' {
			return false
		}
	}
	return true
}

// validHeaderValue refuses control characters other than tab, so no value can split a header.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

func (r *Route) compileRedirect(in *discoveryv1.Redirect) error {
	out := &Redirect{Scheme: in.GetScheme(), Hostname: in.GetHostname(), Port: in.GetPort(), StatusCode: int(in.GetStatusCode())}
	switch {
	case r.Redirect != nil:
		return fmt.Errorf("%w: more than one redirect", ErrInvalid)
	case out.Scheme != "http" && out.Scheme != "https":
		return fmt.Errorf("%w: redirect scheme %q", ErrInvalid, out.Scheme)
	case out.Port > 65535 || checkHostname(out.Hostname) != nil || len(out.Hostname) > 0 && out.Hostname[0] == '*':
		return fmt.Errorf("%w: redirect port %d", ErrInvalid, out.Port)
	}
	switch out.StatusCode {
	case 301, 302, 303, 307, 308:
	default:
		return fmt.Errorf("%w: redirect status %d", ErrInvalid, out.StatusCode)
	}
	path, err := r.pathModifier(in.GetPath())
	out.Path = path
	r.Redirect = out
	return err
}

func (r *Route) compileRewrite(in *discoveryv1.Rewrite) error {
	if r.Rewrite != nil {
		return fmt.Errorf("%w: more than one rewrite", ErrInvalid)
	}
	rw, err := r.rewrite(in)
	r.Rewrite = rw
	return err
}

// rewrite compiles a rewrite of r's requests, the route's own or one of its backends'.
func (r *Route) rewrite(in *discoveryv1.Rewrite) (*Rewrite, error) {
	if err := checkHostname(in.GetHostname()); err != nil || len(in.GetHostname()) > 0 && in.GetHostname()[0] == '*' {
		return nil, fmt.Errorf("%w: rewrite hostname %q", ErrInvalid, in.GetHostname())
	}
	path, err := r.pathModifier(in.GetPath())
	return &Rewrite{Hostname: in.GetHostname(), Path: path}, err
}

// pathModifier compiles a path replacement, in the router's form of paths (see CleanPath);
// replacing the matched prefix needs a PathPrefix match.
func (r *Route) pathModifier(in *discoveryv1.PathModifier) (*PathModifier, error) {
	switch k := in.GetKind().(type) {
	case nil:
		return nil, nil
	case *discoveryv1.PathModifier_ReplaceFullPath:
		return &PathModifier{Full: true, Value: canonicalValue(k.ReplaceFullPath)}, checkPath(k.ReplaceFullPath)
	case *discoveryv1.PathModifier_ReplacePrefixMatch:
		if r.path.kind != MatchPrefix {
			return nil, fmt.Errorf("%w: prefix replacement without a PathPrefix match", ErrInvalid)
		}
		return &PathModifier{Value: canonicalValue(k.ReplacePrefixMatch)}, checkPath(k.ReplacePrefixMatch)
	}
	return nil, fmt.Errorf("%w: unknown path modifier", ErrInvalid)
}

func checkPath(p string) error {
	if p != "" && p[0] != '/' {
		return fmt.Errorf("%w: path %q does not start with /", ErrInvalid, p)
	}
	for i := 0; i < len(p); i++ {
		if p[i] < ' ' || p[i] == 0x7f {
			return fmt.Errorf("%w: path %q has control characters", ErrInvalid, p)
		}
	}
	return nil
}

func (c *compiler) compileMirror(r *Route, in *discoveryv1.Mirror) error {
	if in.GetDenominator() == 0 || in.GetNumerator() > in.GetDenominator() {
		return fmt.Errorf("%w: mirror fraction %d/%d", ErrInvalid, in.GetNumerator(), in.GetDenominator())
	}
	r.refs = append(r.refs, in.GetCluster())
	cl, ok := c.table.clusterNames[in.GetCluster()]
	if !ok || in.GetNumerator() == 0 {
		return nil
	}
	r.Mirrors = append(r.Mirrors, &Mirror{Cluster: cl.ref, Numerator: in.GetNumerator(), Denominator: in.GetDenominator()})
	return nil
}
