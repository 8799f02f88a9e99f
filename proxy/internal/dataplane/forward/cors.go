package forward

import (
	"net/http"
	"slices"
	"strings"

	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
)

// Fields of the CORS protocol (Fetch standard, section 3.2).
const (
	headerOrigin              = "Origin"
	headerVary                = "Vary"
	headerRequestMethod       = "Access-Control-Request-Method"
	headerRequestHeaders      = "Access-Control-Request-Headers"
	headerAllowOrigin         = "Access-Control-Allow-Origin"
	headerAllowCredentials    = "Access-Control-Allow-Credentials"
	headerAllowMethods        = "Access-Control-Allow-Methods"
	headerAllowHeaders        = "Access-Control-Allow-Headers"
	headerExposeHeaders       = "Access-Control-Expose-Headers"
	headerMaxAge              = "Access-Control-Max-Age"
	reasonCORSOriginForbidden = "cors_origin_not_allowed"
)

// isPreflight says whether the request is a CORS preflight: OPTIONS with an Origin and an
// Access-Control-Request-Method.
func isPreflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && len(r.Header[headerOrigin]) > 0 && len(r.Header[headerRequestMethod]) > 0
}

// preflight answers a CORS preflight itself, never reaching a backend: 204, with the CORS
// headers when the origin is allowed and none when it is not, which the browser takes as a
// refusal. A "*" of the filter is sent as "*" only without credentials; with them the request's
// own method and headers are echoed, as the spec asks.
func (x *exchange) preflight(c *router.CORS) int {
	hdr := x.w.Header()
	origin := x.r.Header.Get(headerOrigin)
	if c.EchoOrigin() {
		addVary(hdr, headerOrigin)
	}
	if !c.AllowOrigin(origin) {
		x.reason = reasonCORSOriginForbidden
		x.writeHeader(http.StatusNoContent)
		return http.StatusNoContent
	}
	allowOrigin(hdr, c, origin)
	switch method := x.r.Header.Get(headerRequestMethod); {
	case c.AnyMethod && c.Credentials:
		addVary(hdr, headerRequestMethod)
		if validTokenList(method) {
			hdr[headerAllowMethods] = []string{method}
		}
	case c.AnyMethod:
		hdr[headerAllowMethods] = []string{"*"}
	case c.Methods != "":
		hdr[headerAllowMethods] = []string{c.Methods}
	}
	switch {
	case c.AnyHeader && c.Credentials:
		addVary(hdr, headerRequestHeaders)
		if requested := strings.Join(x.r.Header[headerRequestHeaders], ", "); requested != "" && validTokenList(requested) {
			hdr[headerAllowHeaders] = []string{requested}
		}
	case c.AnyHeader:
		hdr[headerAllowHeaders] = []string{"*"}
	case c.Headers != "":
		hdr[headerAllowHeaders] = []string{c.Headers}
	}
	if c.Expose != "" {
		hdr[headerExposeHeaders] = []string{c.Expose}
	} else if c.ExposeAny && !c.Credentials {
		hdr[headerExposeHeaders] = []string{"*"}
	}
	hdr[headerMaxAge] = []string{c.MaxAge}
	x.writeHeader(http.StatusNoContent)
	return http.StatusNoContent
}

// corsResponse adds to the response header hdr of an actual (not preflight) request the CORS
// headers its origin earns: none when the request has no Origin or one not allowed. An answer
// that names the origin varies with it, so every answer of the route says Vary: Origin then,
// including those without CORS headers, which keeps shared caches from mixing them up.
func (x *exchange) corsResponse(hdr http.Header, c *router.CORS) {
	if c.EchoOrigin() {
		addVary(hdr, headerOrigin)
	}
	origins := x.r.Header[headerOrigin]
	if len(origins) == 0 || !c.AllowOrigin(origins[0]) {
		return
	}
	allowOrigin(hdr, c, origins[0])
	switch {
	case c.Expose != "":
		hdr[headerExposeHeaders] = []string{c.Expose}
	case c.ExposeAny && !c.Credentials:
		hdr[headerExposeHeaders] = []string{"*"}
	case c.ExposeAny:
		// "*" means no header with credentials: name each header of this response instead.
		names := make([]string, 0, len(hdr))
		for name := range hdr {
			if !strings.HasPrefix(name, "Access-Control-") {
				names = append(names, name)
			}
		}
		slices.Sort(names)
		if len(names) > 0 {
			hdr[headerExposeHeaders] = []string{strings.Join(names, ", ")}
		}
	}
}

// allowOrigin sets Access-Control-Allow-Origin, "*" only when any origin is allowed without
// credentials, and Access-Control-Allow-Credentials.
func allowOrigin(hdr http.Header, c *router.CORS, origin string) {
	if c.EchoOrigin() {
		hdr[headerAllowOrigin] = []string{origin}
	} else {
		hdr[headerAllowOrigin] = []string{"*"}
	}
	if c.Credentials {
		hdr[headerAllowCredentials] = []string{"true"}
	} else {
		delete(hdr, headerAllowCredentials)
	}
}

// addVary adds name to the Vary field unless it is there already, or Vary is "*".
func addVary(hdr http.Header, name string) {
	for _, v := range hdr[headerVary] {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f == "*" || strings.EqualFold(f, name) {
				return
			}
		}
	}
	hdr[headerVary] = append(hdr[headerVary], name)
}

// validTokenList accepts a comma-separated list of RFC 9110 tokens, the only thing a preflight
// echoes back.
func validTokenList(s string) bool {
	if s == "" {
		return false
	}
	for f := range strings.SplitSeq(s, ",") {
		f = strings.Trim(f, " \t")
		if f == "" {
			return false
		}
		for i := 0; i < len(f); i++ {
			if !isTokenChar(f[i]) {
				return false
			}
		}
	}
	return true
}

func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
