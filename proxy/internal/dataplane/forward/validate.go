package forward

import (
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"

	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
)

// Reasons the proxy gives in the access log and the refusal metric.
const (
	reasonBadMethod        = "bad_method"
	reasonMethodNotAllowed = "method_not_allowed"
	reasonMethodCase       = http1.ReasonMethodCase
	reasonUserinfo         = "userinfo_in_target"
	reasonBadHost          = "bad_host"
	reasonBadPath          = "bad_path"
	reasonAmbiguousPath    = "ambiguous_path"
	reasonBadScheme        = "bad_scheme"
	reasonMisdirected      = "misdirected_request"
	reasonContentLength    = "content_length_mismatch"
	reasonHeaderCount      = ReasonHeaderCount
	reasonHeaderBytes      = ReasonHeaderBytes
	reasonManagedTrailer   = "managed_trailer"
	reasonBodyTooLarge     = "body_too_large"
	reasonBodyTimeout      = "body_timeout"
	reasonClientBody       = "client_body_error"
	reasonClientClosed     = "client_closed"
	reasonNoEndpoints      = "no_endpoints"
	reasonConnect          = "upstream_connect"
	reasonTimeout          = "upstream_timeout"
	reasonUpstreamReset    = "upstream_reset"
	reasonUpstreamError    = "upstream_error"
	reasonUpstreamTLS      = "upstream_tls"
	reasonBackendTLSPolicy = "backend_tls_policy"
	reasonUpstreamBody     = "upstream_body_error"
	reasonSendTimeout      = "send_error"
	reasonShuttingDown     = "shutting_down"
)

// The reasons of the header limits, which the listeners give the heads their engine refused
// for the same limits.
const (
	ReasonHeaderCount = "too_many_headers"
	ReasonHeaderBytes = "headers_too_large"
)

// statusClientClosed is recorded, never sent, for a request whose client left before its
// response: the convention of nginx, which log readers know.
const statusClientClosed = 499

// validate checks what the HTTP engine leaves to the application and returns the refusal
// status and reason, or 0. It also normalizes the target (see checkTarget).
func (x *exchange) validate() (int, string) {
	r := x.r
	switch {
	case !httpguts.ValidHeaderFieldName(r.Method):
		// A method is a token (RFC 9110 9.1); HTTP/2 hands over any :method.
		return http.StatusBadRequest, reasonBadMethod
	case http1.HasLowerCase(r.Method):
		// Before routing and before the check of CONNECT and TRACE, which a `connect` or
		// `trace` would pass: the native engine refuses it already, net/http and HTTP/2 hand
		// it over as it came.
		return http.StatusBadRequest, reasonMethodCase
	case r.Method == http.MethodConnect || r.Method == http.MethodTrace:
		// CONNECT opens tunnels to anywhere; TRACE reflects credentials back.
		x.w.Header().Set("Allow", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS")
		return http.StatusMethodNotAllowed, reasonMethodNotAllowed
	case r.URL.User != nil:
		return http.StatusBadRequest, reasonUserinfo
	case r.URL.Scheme != "" && r.URL.Scheme != "http" && r.URL.Scheme != "https":
		// An absolute-form target names the scheme; the proxy forwards HTTP alone.
		return http.StatusBadRequest, reasonBadScheme
	case !validHost(r.Host):
		return http.StatusBadRequest, reasonBadHost
	}
	if status, reason := x.checkHeaders(); status != 0 {
		return status, reason
	}
	if r.ProtoMajor == 2 && !h2ContentLengthAgrees(r) {
		// RFC 9113 8.1.1: malformed, never forwarded, and answered 400 (which the RFC allows
		// before the stream closes). Resetting it from a handler could only say INTERNAL_ERROR
		// (Go's server resets a panicking handler's stream so), putting the fault on the
		// proxy. A body longer than its content-length Go's server resets itself with
		// PROTOCOL_ERROR; one that ends short fails the body's read (a 400, see bodyFailed).
		return http.StatusBadRequest, reasonContentLength
	}
	if max := x.h.opts.MaxRequestBodySize; max > 0 && r.ContentLength > max {
		// Refused before the body is read, so no 100 Continue went out.
		return http.StatusRequestEntityTooLarge, reasonBodyTooLarge
	}
	return x.checkTarget()
}

// checkTarget puts the request target in the one form that routing and forwarding share
// (docs/paths.md): the path in the router's form, the query percent-encoded where RFC 3986
// does not allow its bytes, and the Upgrade of a WebSocket request reduced to websocket. It
// refuses a path whose encoded separators or ';' parameters would make a backend that reads
// them so resolve or route it otherwise than the proxy did.
func (x *exchange) checkTarget() (int, string) {
	u := x.r.URL
	var ok bool
	if x.path, ok = router.CleanPath(u.EscapedPath()); !ok || u.Opaque != "" {
		return http.StatusBadRequest, reasonBadPath
	}
	if reading, ambiguous, ok := router.SeparatorReading(x.path); !ok || ambiguous && !x.routesAlike(reading) {
		return http.StatusBadRequest, reasonAmbiguousPath
	}
	u.RawQuery = escapeQuery(u.RawQuery)
	if isWebSocket(x.r) {
		x.r.Header[headerUpgrade] = []string{"websocket"}
	}
	return 0, ""
}

// routesAlike says whether reading, another reading of the request's path, selects the route
// the path does.
func (x *exchange) routesAlike(reading string) bool {
	vh := x.virtualHost()
	if vh == nil {
		return true
	}
	return vh.Match(x.host, x.r.Method, x.path, (*routed)(x)) == vh.Match(x.host, x.r.Method, reading, (*routed)(x))
}

// validHost accepts a Host (or :authority) of RFC 3986's authority grammar without userinfo:
// a host name or IPv4 address, or an IPv6 literal in brackets, either with a port of digits
// once at most.
func validHost(h string) bool {
	var port string
	hasPort := false
	if strings.HasPrefix(h, "[") {
		end := strings.IndexByte(h, ']')
		if end < 0 {
			return false
		}
		if ip, err := netip.ParseAddr(h[1:end]); err != nil || !ip.Is6() || ip.Zone() != "" {
			return false
		}
		if rest := h[end+1:]; rest != "" {
			if port, hasPort = strings.CutPrefix(rest, ":"); !hasPort {
				return false
			}
		}
	} else {
		var host string
		host, port, hasPort = strings.Cut(h, ":")
		if host == "" || !regName(host) {
			return false
		}
	}
	return !hasPort || validPort(port)
}

// regName says whether host holds only the bytes of a reg-name or IPv4 address: unreserved,
// sub-delims and escapes.
func regName(host string) bool {
	for i := 0; i < len(host); i++ {
		if c := host[i]; !isAlnum(c) && strings.IndexByte("-._~!$&'()*+,;=%", c) < 0 {
			return false
		}
	}
	return true
}

// validPort accepts up to five digits, or none (RFC 3986 allows an empty port).
func validPort(port string) bool {
	if len(port) > 5 {
		return false
	}
	for i := 0; i < len(port); i++ {
		if port[i] < '0' || port[i] > '9' {
			return false
		}
	}
	return true
}

// escapeQuery percent-encodes every byte of a raw query that RFC 3986 3.4 does not allow
// there (spaces, controls, bytes of 0x80 and above, '"', '<', '>', '\', '^', '`', '{', '|',
// '}', '[', ']', '#' and a '%' that starts no escape), so that it cannot split the request line
// upstream and every reader of it takes the same query. Escapes it holds are kept as they are.
func escapeQuery(q string) string {
	i := 0
	for i < len(q) && queryByte(q, i) {
		i++
	}
	if i == len(q) {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 16)
	b.WriteString(q[:i])
	for ; i < len(q); i++ {
		if queryByte(q, i) {
			b.WriteByte(q[i])
			continue
		}
		b.WriteByte('%')
		b.WriteByte(upperHex[q[i]>>4])
		b.WriteByte(upperHex[q[i]&15])
	}
	return b.String()
}

const upperHex = "0123456789ABCDEF"

// queryByte says whether q[i] may stand as it is in a query: a pchar, '/', '?', or the '%' of
// a well-formed escape.
func queryByte(q string, i int) bool {
	c := q[i]
	switch {
	case isAlnum(c):
		return true
	case c == '%':
		return i+2 < len(q) && isHex(q[i+1]) && isHex(q[i+2])
	}
	return strings.IndexByte("-._~!$&'()*+,;=:@/?", c) >= 0
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// checkHeaders enforces the header count and size limits.
func (x *exchange) checkHeaders() (int, string) {
	n, size := 0, 0
	for k, vs := range x.r.Header {
		n += len(vs)
		for _, v := range vs {
			size += len(k) + len(v) + 4
		}
	}
	switch {
	case n > x.h.opts.MaxHeaderCount:
		return http.StatusRequestHeaderFieldsTooLarge, reasonHeaderCount
	case size > x.h.opts.MaxHeaderBytes:
		return http.StatusRequestHeaderFieldsTooLarge, reasonHeaderBytes
	}
	return 0, ""
}

// h2ContentLengthAgrees says whether an HTTP/2 request's content-length, when it has one, is
// one number that agrees with its body: the engine checks an open body against it, but takes
// a request whose HEADERS ended the stream as empty whatever content-length it carried.
func h2ContentLengthAgrees(r *http.Request) bool {
	vs, ok := r.Header["Content-Length"]
	if !ok {
		return true
	}
	if len(vs) != 1 {
		return false
	}
	n, err := strconv.ParseUint(vs[0], 10, 63)
	if err != nil {
		return false
	}
	if r.Body == nil || r.Body == http.NoBody {
		return n == 0
	}
	return int64(n) == r.ContentLength
}
