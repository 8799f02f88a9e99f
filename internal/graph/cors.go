package graph

import (
	"fmt"
	"regexp"

	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// corsOrigin is the CORSOrigin syntax of the CRD: "*" alone, or an http or https origin whose
// host may start with "*." or be "*", with an optional port.
var corsOrigin = regexp.MustCompile(`^(\*|https?://((\*\.)?([a-zA-Z0-9-]+\.)*[a-zA-Z0-9-]+|\*)(:[0-9]{1,5})?)$`)

// corsToken is an RFC 9110 token: the syntax of a method and of a header name.
var corsToken = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// validateCORS checks what the CRD checks, for objects that did not pass through the API
// server's validation: origin, method and header syntax, "*" only alone, ports in range and a
// non-negative maxAge.
func validateCORS(c *gwapiv1.HTTPCORSFilter) string {
	if c == nil {
		return "cors is missing"
	}
	for _, o := range c.AllowOrigins {
		if msg := validateOrigin(string(o)); msg != "" {
			return msg
		}
	}
	if msg := wildcardAlone("allowOrigins", c.AllowOrigins); msg != "" {
		return msg
	}
	for _, m := range c.AllowMethods {
		if !corsToken.MatchString(string(m)) {
			return fmt.Sprintf("CORS method %q is not a method", m)
		}
	}
	if msg := wildcardAlone("allowMethods", c.AllowMethods); msg != "" {
		return msg
	}
	for _, list := range [][]gwapiv1.HTTPHeaderName{c.AllowHeaders, c.ExposeHeaders} {
		for _, h := range list {
			if !corsToken.MatchString(string(h)) {
				return fmt.Sprintf("CORS header %q is not a header name", h)
			}
		}
	}
	if msg := wildcardAlone("allowHeaders", c.AllowHeaders); msg != "" {
		return msg
	}
	if c.MaxAge < 0 {
		return fmt.Sprintf("CORS maxAge %d is negative", c.MaxAge)
	}
	return ""
}

func validateOrigin(o string) string {
	m := corsOrigin.FindStringSubmatch(o)
	if m == nil {
		return fmt.Sprintf("CORS origin %q is not \"*\" or <scheme>://<host>[:<port>]", o)
	}
	if port := m[5]; port != "" {
		var n int
		if _, err := fmt.Sscanf(port[1:], "%d", &n); err != nil || n < 1 || n > 65535 {
			return fmt.Sprintf("CORS origin %q has an invalid port", o)
		}
	}
	return ""
}

func wildcardAlone[T ~string](field string, list []T) string {
	for _, v := range list {
		if v == "*" && len(list) > 1 {
			return fmt.Sprintf("CORS %s cannot hold \"*\" with other values", field)
		}
	}
	return ""
}
