package snapshot

// Route is one (hostname, match) pair of an HTTPRoute rule with the rule's action.
type Route struct {
	// Name is "<namespace>/<route>/<rule index>/<match index>".
	Name string `json:"name"`
	// Hostname is the route hostname intersected with the listener's; same syntax as
	// VirtualHost.Hostname.
	Hostname string `json:"hostname,omitempty"`
	Match    Match  `json:"match"`
	// Filters apply in order.
	Filters []Filter `json:"filters,omitempty"`
	// Backends split the requests by weight (a request goes to backend i with probability
	// weight_i / sum of weights).
	Backends []Backend `json:"backends,omitempty"`
	// DirectStatus, when set, answers every request with this status and no body: a rule with
	// nothing to forward to (no backendRefs, or all weights zero) gets 500.
	DirectStatus int32     `json:"directStatus,omitempty"`
	Timeouts     *Timeouts `json:"timeouts,omitempty"`
	Retry        *Retry    `json:"retry,omitempty"`
}

// Match holds the conditions a request must meet, all of them.
type Match struct {
	Path PathMatch `json:"path"`
	// Method, when set, must equal the request method.
	Method string `json:"method,omitempty"`
	// Headers have lower-case names (compare names case-insensitively), one entry per name.
	Headers []ValueMatch `json:"headers,omitempty"`
	// QueryParams compare names exactly, one entry per name.
	QueryParams []ValueMatch `json:"queryParams,omitempty"`
}

// Match types. Regular expressions use RE2 syntax and must match the whole value.
const (
	MatchExact             = "Exact"
	MatchPathPrefix        = "PathPrefix"
	MatchRegularExpression = "RegularExpression"
)

// PathMatch matches the request path. PathPrefix matches whole path elements: "/foo" matches
// "/foo" and "/foo/bar", not "/foobar"; a trailing slash in the value is ignored.
type PathMatch struct {
	Type  string `json:"type"`
	Value string `json:"value"`
}

// ValueMatch matches a header or query parameter value.
type ValueMatch struct {
	Type  string `json:"type"`
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Filter is one filter; exactly one field besides Type is set.
type Filter struct {
	Type            string          `json:"type"`
	RequestHeaders  *HeaderModifier `json:"requestHeaders,omitempty"`
	ResponseHeaders *HeaderModifier `json:"responseHeaders,omitempty"`
	Redirect        *Redirect       `json:"redirect,omitempty"`
	Rewrite         *Rewrite        `json:"rewrite,omitempty"`
	Mirror          *Mirror         `json:"mirror,omitempty"`
	CORS            *CORS           `json:"cors,omitempty"`
}

// Filter types.
const (
	FilterRequestHeaders  = "RequestHeaderModifier"
	FilterResponseHeaders = "ResponseHeaderModifier"
	FilterRedirect        = "RequestRedirect"
	FilterRewrite         = "URLRewrite"
	FilterMirror          = "RequestMirror"
	FilterCORS            = "CORS"
)

// CORS answers preflight requests and adds the CORS headers to the answers of allowed origins.
// AllowOrigins hold "*" alone or origins whose host may start with a "*" label; AllowMethods,
// AllowHeaders and ExposeHeaders are names or "*" alone. MaxAge is in seconds, 5 when unset.
type CORS struct {
	AllowOrigins     []string `json:"allowOrigins,omitempty"`
	AllowCredentials bool     `json:"allowCredentials,omitempty"`
	AllowMethods     []string `json:"allowMethods,omitempty"`
	AllowHeaders     []string `json:"allowHeaders,omitempty"`
	ExposeHeaders    []string `json:"exposeHeaders,omitempty"`
	MaxAge           int32    `json:"maxAge"`
}

// HeaderModifier sets (replaces), adds (appends) and removes headers, in that order.
type HeaderModifier struct {
	Set    []Header `json:"set,omitempty"`
	Add    []Header `json:"add,omitempty"`
	Remove []string `json:"remove,omitempty"`
}

// Header is a header name and value.
type Header struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Redirect answers with a redirect. Scheme and Port are always resolved; the Location header
// omits the port when it is the scheme's default (80 for http, 443 for https). An empty
// Hostname keeps the request's host; a nil Path keeps the request's path.
type Redirect struct {
	Scheme     string        `json:"scheme"`
	Hostname   string        `json:"hostname,omitempty"`
	Port       int32         `json:"port"`
	Path       *PathModifier `json:"path,omitempty"`
	StatusCode int32         `json:"statusCode"`
}

// Rewrite rewrites the request before forwarding. An empty Hostname keeps the Host header.
type Rewrite struct {
	Hostname string        `json:"hostname,omitempty"`
	Path     *PathModifier `json:"path,omitempty"`
}

// Path modifier types.
const (
	PathReplaceFull   = "ReplaceFullPath"
	PathReplacePrefix = "ReplacePrefixMatch"
)

// PathModifier replaces the whole path, or the prefix the route's PathPrefix match matched.
type PathModifier struct {
	Type  string `json:"type"`
	Value string `json:"value"`
}

// Mirror sends a copy of Numerator out of Denominator requests to a cluster, ignoring replies.
type Mirror struct {
	Cluster     string `json:"cluster"`
	Numerator   int32  `json:"numerator"`
	Denominator int32  `json:"denominator"`
}

// Backend is one weighted destination of a route.
type Backend struct {
	// Cluster names the destination; empty when ErrorStatus is set.
	Cluster string `json:"cluster,omitempty"`
	Weight  int32  `json:"weight"`
	// ErrorStatus, when set, answers this backend's share of requests with that status: an
	// unresolved backendRef gets 500.
	ErrorStatus int32 `json:"errorStatus,omitempty"`
	// Filters apply only to the requests this backend gets, after the route's: header
	// modifiers and a Rewrite only. A Rewrite's PathReplacePrefix replaces what the route's
	// PathPrefix match matched, as the route's own does; a route with a Rewrite has none on
	// its backends. Mirror copies take none of them. Empty when ErrorStatus is set.
	Filters []Filter `json:"filters,omitempty"`
}
