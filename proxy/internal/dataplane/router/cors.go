package router

import (
	"fmt"
	"strconv"
	"strings"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
)

// CORS is a compiled CORS filter (Gateway API HTTPCORSFilter). The header values are joined
// once here, so answering costs no work beyond the origin check.
type CORS struct {
	// AnyOrigin allows every origin ("*").
	AnyOrigin bool
	origins   []corsOrigin
	// Credentials sends Access-Control-Allow-Credentials: true; with it, no "*" is ever sent.
	Credentials bool
	// AnyMethod, AnyHeader and ExposeAny stand for "*" in their lists.
	AnyMethod, AnyHeader, ExposeAny bool
	// Methods, Headers and Expose are the configured lists joined by ", "; empty when unset or
	// "*".
	Methods, Headers, Expose string
	// MaxAge is the Access-Control-Max-Age value, in seconds.
	MaxAge string
}

// corsOrigin is one allowed origin: scheme, port and host, where a wildcard host matches any
// host ending in suffix (".example.com", or "" for a bare "*") with at least one more byte.
type corsOrigin struct {
	scheme   string
	host     string
	port     string
	wildcard bool
}

func compileCORS(in *discoveryv1.Cors) (*CORS, error) {
	out := &CORS{Credentials: in.GetAllowCredentials(), MaxAge: "5"}
	if in.GetMaxAgeSeconds() > 0 {
		out.MaxAge = strconv.FormatUint(uint64(in.GetMaxAgeSeconds()), 10)
	}
	for _, o := range in.GetAllowOrigins() {
		if o == "*" {
			out.AnyOrigin = true
			continue
		}
		co, ok := parseOrigin(o, true)
		if !ok {
			return nil, fmt.Errorf("%w: CORS origin %q", ErrInvalid, o)
		}
		out.origins = append(out.origins, co)
	}
	var err error
	if out.Methods, out.AnyMethod, err = corsList("method", in.GetAllowMethods()); err != nil {
		return nil, err
	}
	if out.Headers, out.AnyHeader, err = corsList("header", in.GetAllowHeaders()); err != nil {
		return nil, err
	}
	if out.Expose, out.ExposeAny, err = corsList("header", in.GetExposeHeaders()); err != nil {
		return nil, err
	}
	return out, nil
}

// corsList joins names that must be tokens, or reports "*".
func corsList(what string, in []string) (joined string, wild bool, err error) {
	for _, v := range in {
		if v == "*" {
			wild = true
			continue
		}
		if !validHeaderName(v) {
			return "", false, fmt.Errorf("%w: CORS %s %q", ErrInvalid, what, v)
		}
	}
	if wild {
		return "", true, nil
	}
	return strings.Join(in, ", "), false, nil
}

// parseOrigin splits "<scheme>://<host>[:<port>]" into its parts, lower-cased, with the
// scheme's default port when none is given. pattern allows a host of "*" or "*.<domain>".
func parseOrigin(o string, pattern bool) (corsOrigin, bool) {
	var out corsOrigin
	scheme, rest, ok := strings.Cut(o, "://")
	if !ok {
		return out, false
	}
	switch {
	case strings.EqualFold(scheme, "http"):
		out.scheme, out.port = "http", "80"
	case strings.EqualFold(scheme, "https"):
		out.scheme, out.port = "https", "443"
	default:
		return out, false
	}
	host := rest
	if i := strings.LastIndexByte(rest, ':'); i >= 0 && !strings.Contains(rest[i:], "]") {
		host, out.port = rest[:i], rest[i+1:]
		if n, err := strconv.Atoi(out.port); err != nil || n < 1 || n > 65535 || out.port[0] == '0' {
			return out, false
		}
	}
	host = strings.ToLower(host)
	if pattern && (host == "*" || strings.HasPrefix(host, "*.")) {
		out.wildcard, host = true, host[1:]
	}
	if !validOriginHost(host, out.wildcard) {
		return out, false
	}
	out.host = host
	return out, true
}

// validOriginHost accepts a lower-case DNS name or IP address, or an IPv6 literal in brackets;
// empty only as what is left of a bare "*".
func validOriginHost(host string, wildcard bool) bool {
	if host == "" {
		return wildcard
	}
	if host[0] == '[' {
		if len(host) < 3 || host[len(host)-1] != ']' {
			return false
		}
		for i := 1; i < len(host)-1; i++ {
			if c := host[i]; !isDigit(c) && (c < 'a' || c > 'f') && c != ':' && c != '.' {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; !isDigit(c) && (c < 'a' || c > 'z') && c != '-' && c != '.' {
			return false
		}
	}
	return true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// AllowOrigin says whether a request's Origin header value is allowed.
func (c *CORS) AllowOrigin(origin string) bool {
	if c.AnyOrigin {
		return true
	}
	o, ok := parseOrigin(origin, false)
	if !ok {
		return false
	}
	for _, a := range c.origins {
		if a.scheme != o.scheme || a.port != o.port {
			continue
		}
		if a.wildcard && len(o.host) > len(a.host) && strings.HasSuffix(o.host, a.host) ||
			!a.wildcard && o.host == a.host {
			return true
		}
	}
	return false
}

// EchoOrigin says whether the answer names the request's origin rather than "*", which makes
// it vary with the Origin header.
func (c *CORS) EchoOrigin() bool { return !c.AnyOrigin || c.Credentials }
