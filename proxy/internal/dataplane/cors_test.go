package dataplane_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

func corsFilter(c *discoveryv1.Cors) *discoveryv1.Filter {
	return &discoveryv1.Filter{Kind: &discoveryv1.Filter_Cors{Cors: c}}
}

// corsHeaders returns the response's Access-Control-* fields.
func corsHeaders(h http.Header) http.Header {
	out := http.Header{}
	for k, v := range h {
		if strings.HasPrefix(k, "Access-Control-") {
			out[k] = v
		}
	}
	return out
}

func varies(h http.Header, name string) bool {
	for _, v := range h.Values("Vary") {
		for f := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), name) {
				return true
			}
		}
	}
	return false
}

// Tests the CORS filter over a real listener and backend: preflights are answered by the proxy
// and never reach the backend, allowed or not; actual requests from an allowed origin get the
// CORS headers on the backend's answer, others get none; wildcards follow the spec with and
// without credentials; requests without CORS, and routes without the filter, are untouched.
func TestCORS(t *testing.T) {
	t.Parallel()
	app, hits := backend(t, "app")
	d := start(t, dataplane.Options{})
	listed := snaptest.Route("ns/listed/0/0", "", snaptest.Prefix("/listed"), "ns/app:80")
	listed.Filters = []*discoveryv1.Filter{corsFilter(&discoveryv1.Cors{
		AllowOrigins:     []string{"https://www.foo.com", "https://*.bar.com"},
		AllowMethods:     []string{"GET", "OPTIONS"},
		AllowHeaders:     []string{"x-header-1", "x-header-2"},
		ExposeHeaders:    []string{"x-header-3", "x-header-4"},
		AllowCredentials: true,
		MaxAgeSeconds:    3600,
	})}
	anyOrigin := snaptest.Route("ns/any/0/0", "", snaptest.Prefix("/any"), "ns/app:80")
	anyOrigin.Filters = []*discoveryv1.Filter{corsFilter(&discoveryv1.Cors{
		AllowOrigins: []string{"*"}, AllowMethods: []string{"*"}, AllowHeaders: []string{"*"}, ExposeHeaders: []string{"*"},
	})}
	anyCreds := snaptest.Route("ns/any-creds/0/0", "", snaptest.Prefix("/creds"), "ns/app:80")
	anyCreds.Filters = []*discoveryv1.Filter{corsFilter(&discoveryv1.Cors{
		AllowOrigins: []string{"*"}, AllowMethods: []string{"*"}, AllowHeaders: []string{"*"}, ExposeHeaders: []string{"*"},
		AllowCredentials: true,
	})}
	redirect := &discoveryv1.Route{Name: "ns/moved/0/0", Match: snaptest.Prefix("/moved"), Filters: []*discoveryv1.Filter{
		corsFilter(&discoveryv1.Cors{AllowOrigins: []string{"https://www.foo.com"}}),
		filter(&discoveryv1.Filter_Redirect{Redirect: &discoveryv1.Redirect{Scheme: "https", Port: 443, StatusCode: 302}}),
	}}
	plain := snaptest.Route("ns/plain/0/0", "", snaptest.Prefix("/plain"), "ns/app:80")
	apply(t, d, snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "", listed, anyOrigin, anyCreds, redirect, plain)),
		snaptest.Cluster(t, "ns/app:80", hostPort(app)))
	c := client(addr(t, d, 80))
	base := "http://www.example.com"
	preflight := func(t *testing.T, path, origin, method string, extra ...string) response {
		t.Helper()
		before := hits.Load()
		r := do(t, c, "OPTIONS", base+path, append([]string{"Origin: " + origin, "Access-Control-Request-Method: " + method}, extra...)...)
		if r.status != http.StatusNoContent || r.echo.Backend != "" || hits.Load() != before {
			t.Fatalf("preflight %s from %s: %d, backend reached %d times; want 204 from the proxy", path, origin, r.status, hits.Load()-before)
		}
		return r
	}
	want := func(t *testing.T, got http.Header, want map[string]string) {
		t.Helper()
		cors := corsHeaders(got)
		for k, v := range want {
			if g := cors.Get(k); g != v {
				t.Errorf("%s: %q, want %q", k, g, v)
			}
			delete(cors, k)
		}
		if len(cors) > 0 {
			t.Errorf("unexpected CORS headers %v", cors)
		}
	}
	listedAllowed := map[string]string{
		"Access-Control-Allow-Credentials": "true",
		"Access-Control-Allow-Methods":     "GET, OPTIONS",
		"Access-Control-Allow-Headers":     "x-header-1, x-header-2",
		"Access-Control-Expose-Headers":    "x-header-3, x-header-4",
		"Access-Control-Max-Age":           "3600",
	}
	withOrigin := func(m map[string]string, origin string) map[string]string {
		out := map[string]string{"Access-Control-Allow-Origin": origin}
		for k, v := range m {
			out[k] = v
		}
		return out
	}

	t.Run("a preflight from a listed origin gets every configured header", func(t *testing.T) {
		r := preflight(t, "/listed", "https://www.foo.com", "GET", "Access-Control-Request-Headers: x-header-1, x-header-2")
		want(t, r.header, withOrigin(listedAllowed, "https://www.foo.com"))
		if !varies(r.header, "Origin") {
			t.Errorf("Vary %q lacks Origin", r.header.Values("Vary"))
		}
	})
	for _, origin := range []string{"https://www.bar.com", "https://a.b.bar.com", "https://www.bar.com:443"} {
		t.Run("a preflight from "+origin+" matches the wildcard origin", func(t *testing.T) {
			want(t, preflight(t, "/listed", origin, "GET").header, withOrigin(listedAllowed, origin))
		})
	}
	for _, origin := range []string{"https://foobar.com", "https://bar.com", "http://www.bar.com", "https://www.bar.com:8443", "https://www.foo.com.evil.com", "null"} {
		t.Run("a preflight from "+origin+" gets no CORS headers", func(t *testing.T) {
			r := preflight(t, "/listed", origin, "GET")
			want(t, r.header, nil)
			if !varies(r.header, "Origin") {
				t.Errorf("Vary %q lacks Origin", r.header.Values("Vary"))
			}
		})
	}
	t.Run("a preflight for a method or headers not allowed gets the allowed lists only", func(t *testing.T) {
		r := preflight(t, "/listed", "https://www.foo.com", "DELETE", "Access-Control-Request-Headers: x-other")
		if m, h := r.header.Get("Access-Control-Allow-Methods"), r.header.Get("Access-Control-Allow-Headers"); strings.Contains(m, "DELETE") || strings.Contains(h, "x-other") {
			t.Errorf("allowed methods %q, headers %q", m, h)
		}
	})
	t.Run("wildcards without credentials answer *", func(t *testing.T) {
		r := preflight(t, "/any", "https://foobar.com:12345", "PUT", "Access-Control-Request-Headers: x-a")
		want(t, r.header, map[string]string{
			"Access-Control-Allow-Origin":   "*",
			"Access-Control-Allow-Methods":  "*",
			"Access-Control-Allow-Headers":  "*",
			"Access-Control-Expose-Headers": "*",
			"Access-Control-Max-Age":        "5",
		})
		if varies(r.header, "Origin") {
			t.Error("an answer of * does not vary with the origin")
		}
	})
	t.Run("wildcards with credentials echo the origin, method and headers, never *", func(t *testing.T) {
		r := preflight(t, "/creds", "https://other.foo.com", "PUT", "Access-Control-Request-Headers: x-header-1, x-header-2")
		want(t, r.header, map[string]string{
			"Access-Control-Allow-Origin":      "https://other.foo.com",
			"Access-Control-Allow-Credentials": "true",
			"Access-Control-Allow-Methods":     "PUT",
			"Access-Control-Allow-Headers":     "x-header-1, x-header-2",
			"Access-Control-Max-Age":           "5",
		})
		for _, v := range []string{"Origin", "Access-Control-Request-Method", "Access-Control-Request-Headers"} {
			if !varies(r.header, v) {
				t.Errorf("Vary %q lacks %s", r.header.Values("Vary"), v)
			}
		}
	})
	t.Run("a request from a listed origin reaches the backend and gets the CORS headers", func(t *testing.T) {
		r := do(t, c, "GET", base+"/listed", "Origin: https://a.bar.com")
		if r.status != 200 || r.echo.Backend != "app" {
			t.Fatalf("got %d from %q", r.status, r.echo.Backend)
		}
		want(t, r.header, map[string]string{
			"Access-Control-Allow-Origin":      "https://a.bar.com",
			"Access-Control-Allow-Credentials": "true",
			"Access-Control-Expose-Headers":    "x-header-3, x-header-4",
		})
		if !varies(r.header, "Origin") {
			t.Errorf("Vary %q lacks Origin", r.header.Values("Vary"))
		}
	})
	t.Run("a request from another origin reaches the backend and gets no CORS headers", func(t *testing.T) {
		r := do(t, c, "GET", base+"/listed", "Origin: https://evil.com")
		if r.status != 200 || r.echo.Backend != "app" {
			t.Fatalf("got %d from %q", r.status, r.echo.Backend)
		}
		want(t, r.header, nil)
		if !varies(r.header, "Origin") {
			t.Errorf("Vary %q lacks Origin", r.header.Values("Vary"))
		}
	})
	t.Run("exposing * with credentials names the response's headers", func(t *testing.T) {
		r := do(t, c, "PUT", base+"/creds", "Origin: https://other.foo.com")
		exposed := strings.Split(r.header.Get("Access-Control-Expose-Headers"), ", ")
		if r.header.Get("Access-Control-Allow-Origin") != "https://other.foo.com" || slices.Contains(exposed, "*") ||
			!slices.Contains(exposed, "X-Backend") || !slices.Contains(exposed, "Content-Type") {
			t.Errorf("got %v", corsHeaders(r.header))
		}
	})
	t.Run("a request from any origin on a * route gets *", func(t *testing.T) {
		r := do(t, c, "PUT", base+"/any", "Origin: https://foobar.com")
		want(t, r.header, map[string]string{"Access-Control-Allow-Origin": "*", "Access-Control-Expose-Headers": "*"})
	})
	t.Run("a redirect carries the CORS headers", func(t *testing.T) {
		r := do(t, c, "GET", base+"/moved", "Origin: https://www.foo.com")
		if r.status != 302 || r.header.Get("Access-Control-Allow-Origin") != "https://www.foo.com" {
			t.Errorf("got %d %v", r.status, r.header)
		}
	})
	t.Run("a request without an Origin gets no CORS headers", func(t *testing.T) {
		r := do(t, c, "GET", base+"/listed")
		if r.status != 200 || r.echo.Backend != "app" {
			t.Fatalf("got %d", r.status)
		}
		want(t, r.header, nil)
	})
	t.Run("an OPTIONS request that is no preflight reaches the backend", func(t *testing.T) {
		r := do(t, c, "OPTIONS", base+"/listed", "Origin: https://www.foo.com")
		if r.status != 200 || r.echo.Method != "OPTIONS" {
			t.Errorf("got %d %+v", r.status, r.echo)
		}
	})
	t.Run("a route without the filter forwards a preflight untouched", func(t *testing.T) {
		r := do(t, c, "OPTIONS", base+"/plain", "Origin: https://www.foo.com", "Access-Control-Request-Method: GET")
		if r.status != 200 || r.echo.Method != "OPTIONS" || len(corsHeaders(r.header)) > 0 || varies(r.header, "Origin") {
			t.Errorf("got %d %v", r.status, r.header)
		}
		if http.Header(r.echo.Headers).Get("Access-Control-Request-Method") != "GET" {
			t.Errorf("backend got %v", r.echo.Headers)
		}
	})
}
