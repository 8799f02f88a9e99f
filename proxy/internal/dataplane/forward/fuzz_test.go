package forward

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
)

// FuzzCleanPath checks the path normalization routing depends on: the result is an absolute
// path without dot segments or empty segments inside it, normalizing it again changes nothing,
// and the decoded form routes match is the result decoded.
func FuzzCleanPath(f *testing.F) {
	for _, seed := range []string{"/", "", "/a/b", "/a/../b", "/%2e%2e/admin", "/a//b/./c/", "/a%2Fb", "/%zz", "//x", "/a/%2E%2e/%41", "/.", "/..", "/a/b/..", "a/b"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, p string) {
		escaped, decoded, ok := cleanPath(p)
		if !ok {
			return
		}
		if !strings.HasPrefix(escaped, "/") {
			t.Fatalf("cleanPath(%q) = %q: not absolute", p, escaped)
		}
		inner := strings.TrimSuffix(escaped, "/")
		for _, bad := range []string{"/./", "/../", "//"} {
			if strings.Contains(inner+"/", bad) {
				t.Fatalf("cleanPath(%q) = %q: contains %q", p, escaped, bad)
			}
		}
		again, _, ok := cleanPath(escaped)
		if !ok || again != escaped {
			t.Fatalf("cleanPath(%q) = %q, then %q (%v)", p, escaped, again, ok)
		}
		if want, err := url.PathUnescape(escaped); err != nil || want != decoded {
			t.Fatalf("cleanPath(%q): decoded %q, want %q (%v)", p, decoded, want, err)
		}
	})
}

// FuzzHeaderFilters checks the request header handling against any header names and values:
// no hop-by-hop field nor any field the Connection header names is forwarded, a route's set
// leaves exactly its one value, and the client's X-Forwarded-For values end up in one field.
func FuzzHeaderFilters(f *testing.F) {
	f.Add("X-Tenant", "red", "close, X-Tenant", "10.0.0.1")
	f.Add("Keep-Alive", "5", "keep-alive", "")
	f.Add("Te", "trailers", "Te, X-A", "a, b")
	f.Fuzz(func(t *testing.T, name, value, connection, xff string) {
		name = http.CanonicalHeaderKey(name)
		in := http.Header{}
		in[name] = []string{value, value}
		in["Connection"] = []string{connection}
		if xff != "" {
			in["X-Forwarded-For"] = []string{xff, xff}
		}
		out := http.Header{}
		copyEndToEnd(out, in)
		tokens := connectionTokens(in)
		for k := range out {
			if hopByHop[k] || tokens[k] {
				t.Fatalf("forwarded %q with Connection %q", k, connection)
			}
		}
		modifyHeaders(out, &router.HeaderModifier{Set: []router.Header{{Name: "X-Set", Value: "v"}}})
		if got := out.Values("X-Set"); len(got) != 1 || got[0] != "v" {
			t.Fatalf("set left %q", got)
		}
		got := forwardedFor(out["X-Forwarded-For"], "192.0.2.1:4000")
		if !strings.HasSuffix(got, "192.0.2.1") {
			t.Fatalf("X-Forwarded-For %q does not end with the client", got)
		}
	})
}
