package forward

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// Reasons the proxy gives in the access log and the refusal metric.
const (
	reasonBadMethod        = "bad_method"
	reasonMethodNotAllowed = "method_not_allowed"
	reasonUserinfo         = "userinfo_in_target"
	reasonBadHost          = "bad_host"
	reasonBadPath          = "bad_path"
	reasonMisdirected      = "misdirected_request"
	reasonContentLength    = "content_length_mismatch"
	reasonHeaderCount      = "too_many_headers"
	reasonHeaderBytes      = "headers_too_large"
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

// statusClientClosed is recorded, never sent, for a request whose client left before its
// response: the convention of nginx, which log readers know.
const statusClientClosed = 499

// validate checks what the HTTP engine leaves to the application and returns the refusal
// status and reason, or 0. It also normalizes the target path.
func (x *exchange) validate() (int, string) {
	r := x.r
	switch {
	case !httpguts.ValidHeaderFieldName(r.Method):
		// A method is a token (RFC 9110 9.1); HTTP/2 hands over any :method.
		return http.StatusBadRequest, reasonBadMethod
	case r.Method == http.MethodConnect || r.Method == http.MethodTrace:
		// CONNECT opens tunnels to anywhere; TRACE reflects credentials back.
		x.w.Header().Set("Allow", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS")
		return http.StatusMethodNotAllowed, reasonMethodNotAllowed
	case r.URL.User != nil:
		return http.StatusBadRequest, reasonUserinfo
	case r.Host == "" || strings.ContainsAny(r.Host, "@ \t"):
		return http.StatusBadRequest, reasonBadHost
	}
	if status, reason := x.checkHeaders(); status != 0 {
		return status, reason
	}
	if r.ProtoMajor == 2 && !h2ContentLengthAgrees(r) {
		// RFC 9113 8.1.1: malformed; a stream error, never forwarded.
		x.abort = true
		return http.StatusBadRequest, reasonContentLength
	}
	if max := x.h.opts.MaxRequestBodySize; max > 0 && r.ContentLength > max {
		// Refused before the body is read, so no 100 Continue went out.
		return http.StatusRequestEntityTooLarge, reasonBodyTooLarge
	}
	var ok bool
	if x.path, x.matchPath, ok = cleanPath(r.URL.EscapedPath()); !ok {
		return http.StatusBadRequest, reasonBadPath
	}
	return 0, ""
}

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

// cleanPath normalizes an escaped origin-form path: percent-encoded unreserved characters are
// decoded, dot segments removed and repeated slashes merged, so that the path a route matches
// and the path the backend receives cannot disagree. It returns the escaped path to forward
// and its decoded form to match, or false for a path that is not one.
func cleanPath(p string) (escaped, decoded string, ok bool) {
	if p == "" {
		return "/", "/", true
	}
	if p[0] != '/' {
		return "", "", false
	}
	if !strings.Contains(p, "%") && !strings.Contains(p, "/.") && !strings.Contains(p, "//") {
		return p, p, true
	}
	p, ok = decodeUnreserved(p)
	if !ok {
		return "", "", false
	}
	p = removeDotSegments(p)
	d, err := pathUnescape(p)
	if err != nil {
		return "", "", false
	}
	return p, d, true
}

// decodeUnreserved decodes %XX escapes of unreserved characters (RFC 3986 6.2.2.2) and
// upper-cases the hex digits of the others; it fails on a malformed escape.
func decodeUnreserved(p string) (string, bool) {
	if !strings.Contains(p, "%") {
		return p, true
	}
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
			return "", false
		}
		v := unhex(p[i+1])<<4 | unhex(p[i+2])
		if isUnreserved(v) {
			b.WriteByte(v)
		} else {
			b.WriteByte('%')
			b.WriteString(strings.ToUpper(p[i+1 : i+3]))
		}
		i += 2
	}
	return b.String(), true
}

// removeDotSegments applies RFC 3986 5.2.4 to an absolute path and merges repeated slashes.
func removeDotSegments(p string) string {
	segs := strings.Split(p[1:], "/")
	out := make([]string, 0, len(segs))
	for i, s := range segs {
		last := i == len(segs)-1
		switch s {
		case ".":
			if last {
				out = append(out, "")
			}
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			if last {
				out = append(out, "")
			}
		case "":
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, s)
		}
	}
	return "/" + strings.Join(out, "/")
}

func pathUnescape(p string) (string, error) {
	if !strings.Contains(p, "%") {
		return p, nil
	}
	return url.PathUnescape(p)
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}
