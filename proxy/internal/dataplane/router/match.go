package router

import "math"

// Request gives the router what it cannot take as plain strings: header and query values,
// read only when a candidate route has such conditions. Header names are lower-case.
type Request interface {
	Header(name string) (string, bool)
	Query(name string) (string, bool)
}

// pathIndex holds the routes of one route hostname by how their path matches. Every bucket is
// in route order, so the first route of a bucket that fits is that bucket's best.
type pathIndex struct {
	exact  map[string][]*Route
	prefix map[string][]*Route
	regex  []*Route
	// prefixLens has bit n set when a prefix of length n is in prefix (lengths of 256 and
	// more share bit 255), so matching looks up only the path boundaries that can hit.
	prefixLens [4]uint64
}

func (pi *pathIndex) hasPrefixLen(n int) bool {
	n = min(n, 255)
	return pi.prefixLens[n>>6]&(1<<(n&63)) != 0
}

func newPathIndex() *pathIndex {
	return &pathIndex{exact: map[string][]*Route{}, prefix: map[string][]*Route{}}
}

func (pi *pathIndex) add(r *Route) {
	switch r.path.kind {
	case MatchExact:
		pi.exact[r.path.value] = append(pi.exact[r.path.value], r)
	case MatchPrefix:
		pi.prefix[r.path.value] = append(pi.prefix[r.path.value], r)
		n := min(len(r.path.value), 255)
		pi.prefixLens[n>>6] |= 1 << (n & 63)
	default:
		pi.regex = append(pi.regex, r)
	}
}

// Match returns the first route, in precedence order, whose hostname, path, method, headers and
// query parameters fit the request, or nil. host must be normalized (see NormalizeHost).
func (vh *VirtualHost) Match(host, method, path string, req Request) *Route {
	m := matcher{method: method, path: path, req: req, best: math.MaxInt64}
	h := &vh.hosts
	if pi, ok := h.exact[host]; ok {
		m.index(pi)
	}
	if len(h.wild) > 0 {
		for i := 1; i < len(host); i++ {
			if host[i] != '.' {
				continue
			}
			if pi, ok := h.wild[host[i:]]; ok {
				m.index(pi)
			}
		}
	}
	if h.hasAny {
		m.index(h.any)
	}
	return m.route
}

// Routes returns the virtual host's routes in precedence order; the slice must not be modified.
func (vh *VirtualHost) Routes() []*Route { return vh.routes }

type matcher struct {
	method, path string
	req          Request
	best         int64
	route        *Route
}

// index looks at every bucket of pi that the path can fall in and keeps the lowest-order
// route that fits: the routes of every hostname that matches the request compete.
func (m *matcher) index(pi *pathIndex) {
	if len(pi.exact) > 0 {
		if rs, ok := pi.exact[m.path]; ok {
			m.bucket(rs)
		}
	}
	if len(pi.prefix) > 0 {
		m.prefixes(pi)
	}
	for _, r := range pi.regex {
		if r.order >= m.best {
			break
		}
		if r.path.re.MatchString(m.path) && m.rest(r) {
			m.keep(r)
			break
		}
	}
}

// prefixes looks up every element boundary of the path: "" (the prefix "/"), "/a", "/a/b".
func (m *matcher) prefixes(pi *pathIndex) {
	p := m.path
	for i := 0; i < len(p); i++ {
		if p[i] != '/' || !pi.hasPrefixLen(i) {
			continue
		}
		if rs, ok := pi.prefix[p[:i]]; ok {
			m.bucket(rs)
		}
	}
	if len(p) > 0 && p[len(p)-1] != '/' && pi.hasPrefixLen(len(p)) {
		if rs, ok := pi.prefix[p]; ok {
			m.bucket(rs)
		}
	}
}

func (m *matcher) bucket(rs []*Route) {
	for _, r := range rs {
		if r.order >= m.best {
			return
		}
		if m.rest(r) {
			m.keep(r)
			return
		}
	}
}

func (m *matcher) keep(r *Route) {
	m.best, m.route = r.order, r
}

// rest checks the conditions other than hostname and path.
func (m *matcher) rest(r *Route) bool {
	if r.method != "" && r.method != m.method {
		return false
	}
	for i := range r.headers {
		v, ok := m.req.Header(r.headers[i].name)
		if !ok || !r.headers[i].matches(v) {
			return false
		}
	}
	for i := range r.query {
		v, ok := m.req.Query(r.query[i].name)
		if !ok || !r.query[i].matches(v) {
			return false
		}
	}
	return true
}

func (v *valueMatch) matches(s string) bool {
	if v.kind == MatchRegex {
		return v.re.MatchString(s)
	}
	return s == v.value
}
