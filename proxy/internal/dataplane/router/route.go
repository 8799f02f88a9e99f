package router

import (
	"regexp"
	"time"
)

// MatchKind says how a value is compared.
type MatchKind uint8

// Match kinds.
const (
	MatchExact MatchKind = iota + 1
	MatchPrefix
	MatchRegex
)

// Route is one compiled route: conditions, filters and destinations.
type Route struct {
	// Name is "<namespace>/<route>/<rule>/<match>", for logs and metrics.
	Name string
	// order ranks the route in its virtual host: lower wins. Orders are spaced (see
	// orderGap) so that Update can insert a route between two others without renumbering.
	order    int64
	hostname string
	path     valueMatch
	method   string
	headers  []valueMatch
	query    []valueMatch

	// RequestHeaders apply in order, then Rewrite, then the request is copied to Mirrors.
	RequestHeaders  []*HeaderModifier
	Rewrite         *Rewrite
	Mirrors         []*Mirror
	ResponseHeaders []*HeaderModifier
	// CORS, when set, answers preflight requests and adds the CORS headers to the answers of
	// allowed origins.
	CORS *CORS
	// Redirect, when set, answers the request; nothing is forwarded.
	Redirect *Redirect
	// DirectStatus, when non-zero, answers the request with that status.
	DirectStatus int
	Backends     []Backend
	totalWeight  uint64
	// RequestTimeout bounds the whole request and BackendTimeout one upstream exchange; zero is
	// no bound.
	RequestTimeout time.Duration
	BackendTimeout time.Duration
	// Retry, when set, sends a request again after a failed attempt (see the forward package
	// for which requests and failures).
	Retry *Retry
	// Stats is free for the data plane to keep per-route state in (metric handles); the router
	// never reads it.
	Stats any
	// refs names the clusters the route's backends and mirrors name, present or not: the
	// route compiles differently when one of them comes or goes.
	refs []string
}

// Retry is a route's retry policy: at most Attempts retries after the first attempt, the first
// at least Backoff after the failure.
type Retry struct {
	Attempts int
	Backoff  time.Duration
	// codes has bit s-400 set for each retried response status s in 400-599.
	codes [4]uint64
}

// MaxRetryAttempts caps the retries of one request whatever the route asks; the retry budget
// caps them across requests.
const MaxRetryAttempts = 10

// DefaultRetryBackoff is the least wait before a first retry when the route sets none.
const DefaultRetryBackoff = 25 * time.Millisecond

// RetryStatus says whether a response with status calls for another attempt.
func (r *Retry) RetryStatus(status int) bool {
	i := status - 400
	return i >= 0 && i < 200 && r.codes[i/64]&(1<<(i%64)) != 0
}

type valueMatch struct {
	kind  MatchKind
	name  string
	value string
	re    *regexp.Regexp
}

// Backend is one weighted destination. Exactly one of Cluster and ErrorStatus is set.
// Filters, nil for most backends, apply only to the requests this backend gets, after the
// route's.
type Backend struct {
	Cluster     *ClusterRef
	Weight      uint32
	ErrorStatus int
	Filters     *BackendFilters
	cumulative  uint64
}

// BackendFilters are the header modifiers of one backend, applied in order, and its rewrite,
// applied after the route's request filters to this backend's requests only (never to the
// route's mirror copies). Rewrite's prefix replacement replaces what the route's PathPrefix
// match matched; a route with a backend's Rewrite has none of its own.
type BackendFilters struct {
	RequestHeaders  []*HeaderModifier
	ResponseHeaders []*HeaderModifier
	Rewrite         *Rewrite
}

// HeaderModifier sets (replaces), adds (appends) and removes headers, in that order.
type HeaderModifier struct {
	Set    []Header
	Add    []Header
	Remove []string
}

// Header is a header name and value.
type Header struct {
	Name  string
	Value string
}

// PathModifier replaces a path. Full replaces the whole path; otherwise Value replaces the
// prefix the route's PathPrefix match matched. Value is escaped, in the router's form.
type PathModifier struct {
	Full  bool
	Value string
}

// Rewrite changes the request before it is forwarded. An empty Hostname keeps the Host header.
type Rewrite struct {
	Hostname string
	Path     *PathModifier
}

// Redirect answers with a Location built from the request: scheme and port are resolved, the
// port is omitted when it is the scheme's default, an empty Hostname keeps the request's host
// and a nil Path keeps the request's path.
type Redirect struct {
	Scheme     string
	Hostname   string
	Port       uint32
	Path       *PathModifier
	StatusCode int
}

// Mirror copies Numerator out of Denominator requests to Cluster, ignoring the replies.
type Mirror struct {
	Cluster     *ClusterRef
	Numerator   uint32
	Denominator uint32
}

// Pick returns the backend for a request given a uniformly random n: backend i is chosen
// with probability weight_i / sum of weights. It returns nil when the route has no backends.
func (r *Route) Pick(n uint64) *Backend {
	if r.totalWeight == 0 {
		return nil
	}
	if len(r.Backends) == 1 {
		return &r.Backends[0]
	}
	n %= r.totalWeight
	for i := range r.Backends {
		if n < r.Backends[i].cumulative {
			return &r.Backends[i]
		}
	}
	return &r.Backends[len(r.Backends)-1]
}

// Sample says whether the mirror takes a request given a uniformly random n.
func (m *Mirror) Sample(n uint64) bool {
	if m.Numerator >= m.Denominator {
		return true
	}
	return n%uint64(m.Denominator) < uint64(m.Numerator)
}

// PrefixMatched returns the part of path the route's PathPrefix match matched, or "" when the
// route matches paths otherwise. The result never ends with a slash.
func (r *Route) PrefixMatched() (string, bool) {
	if r.path.kind != MatchPrefix {
		return "", false
	}
	return r.path.value, true
}

// ReplacePath applies m to path, given the route that matched. path and the result are in
// the router's form of paths (see CleanPath): the part of path kept is never decoded, so the
// result holds no dot segment that path did not.
func (m *PathModifier) ReplacePath(r *Route, path string) string {
	if m.Full {
		return m.Value
	}
	prefix, ok := r.PrefixMatched()
	if !ok || len(prefix) > len(path) {
		return m.Value
	}
	out := trimSlashes(m.Value) + path[len(prefix):]
	if out == "" || out[0] != '/' {
		out = "/" + out
	}
	return out
}

func trimSlashes(s string) string {
	for len(s) > 0 && s[len(s)-1] == '/' {
		s = s[:len(s)-1]
	}
	return s
}
