package forward

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
	"coxswain.dev/coxswain/proxy/internal/dataplane/upstream"
)

// FuzzForwardedPath sends any request target through validation, routing and the building
// of the upstream request, on a table where /rw rewrites its prefix to /new, /rd redirects in
// place of it and / takes the rest. Whatever the target, a request that is not refused leaves
// with a path that holds no dot segment, however a backend reads it (encoded slashes and
// backslashes as separators, ';' parameters dropped): the path it matched held none, and no
// step decodes what it kept. The path is the matched one, or the replacement followed by what
// the prefix left; the query is one the request line can carry.
func FuzzForwardedPath(f *testing.F) {
	for _, seed := range []string{
		"/", "/a/b", "/a/../b", "/%2e%2e/admin", "/a//b/./c/", "/a%2Fb", "/%zz", "//x", "/a/%2E%2e/%41",
		"/.", "/..", "/a/b/..", "/rw%2F..%2Fadmin", "/rw/..%2Fadmin", "/rw/a%2fb?q=1", "/rd%2F..%2Fx",
		"/rw\\..\\admin", "/rw/..;/admin", "/x/..;/admin", "/%2Fadmin", "/rw?a=1 /admin HTTP/1.1", "/q?caf\xc3\xa9=100%",
		"http://x/rw/%2e%2e%2f", "/rw;/../x",
	} {
		f.Add(seed)
	}
	h, state := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, target string) {
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + target + " HTTP/1.1\r\nHost: x\r\n\r\n")))
		if err != nil {
			return
		}
		req.RemoteAddr = "192.0.2.1:4000"
		w := httptest.NewRecorder()
		x := &exchange{h: h, w: w, rc: http.NewResponseController(w), r: req, listener: &Listener{Port: 80, Scheme: "http"}, state: state}
		if status, _ := x.validate(); status != 0 {
			return
		}
		if _, ok := router.CleanPath(x.path); !ok || hasDotSegment(x.path) {
			t.Fatalf("%q: matched path %q holds a dot segment", target, x.path)
		}
		route, _ := x.match()
		if route == nil {
			t.Fatalf("%q: no route", target)
		}
		x.route = route
		var sent string
		switch {
		case route.Redirect != nil:
			x.redirect(route.Redirect)
			loc := x.w.Header().Get("Location")
			sent = strings.TrimPrefix(loc, "http://x")
			checkReplaced(t, target, sent, "/target", "/rd", x.path)
		default:
			out := x.outbound(context.Background(), &upstream.Endpoint{Address: "192.0.2.2:80"}, nil, false)
			sent = out.URL.Opaque
			if out.URL.RawQuery != "" {
				sent += "?" + out.URL.RawQuery
			}
			if route.Rewrite != nil {
				checkReplaced(t, target, out.URL.Opaque, "/new", "/rw", x.path)
			} else if out.URL.Opaque != x.path {
				t.Fatalf("%q: matched %q, forwarded %q", target, x.path, out.URL.Opaque)
			}
		}
		if hasDotSegment(sent) {
			t.Fatalf("%q: sent %q, with a dot segment", target, sent)
		}
		if strings.ContainsFunc(sent, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
			t.Fatalf("%q: sent %q, which no request line can carry", target, sent)
		}
	})
}

// fuzzHandler returns a handler and the state of FuzzForwardedPath's table.
func fuzzHandler(tb testing.TB) (*Handler, *State) {
	tb.Helper()
	rw := snaptest.Route("ns/rw/0/0", "", snaptest.Prefix("/rw"), "ns/app:80")
	rw.Filters = []*discoveryv1.Filter{{Kind: &discoveryv1.Filter_Rewrite{Rewrite: &discoveryv1.Rewrite{Path: &discoveryv1.PathModifier{
		Kind: &discoveryv1.PathModifier_ReplacePrefixMatch{ReplacePrefixMatch: "/new"},
	}}}}}
	rd := &discoveryv1.Route{Name: "ns/rd/0/0", Match: snaptest.Prefix("/rd"), Filters: []*discoveryv1.Filter{{Kind: &discoveryv1.Filter_Redirect{Redirect: &discoveryv1.Redirect{
		Scheme: "http", StatusCode: 302, Path: &discoveryv1.PathModifier{Kind: &discoveryv1.PathModifier_ReplacePrefixMatch{ReplacePrefixMatch: "/target"}},
	}}}}}
	all := snaptest.Route("ns/all/0/0", "", snaptest.Prefix("/"), "ns/app:80")
	res := snaptest.Resources(tb, snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "", rw, rd, all)), snaptest.Cluster(tb, "ns/app:80", "192.0.2.2:80"))
	table, err := router.Compile(snaptest.Seq(res))
	if err != nil {
		tb.Fatal(err)
	}
	return NewHandler(Options{}), &State{Table: table}
}

// checkReplaced fails unless sent is replacement followed by what prefix left of matched.
func checkReplaced(t *testing.T, target, sent, replacement, prefix, matched string) {
	t.Helper()
	sent, _, _ = strings.Cut(sent, "?")
	rest := strings.TrimPrefix(matched, prefix)
	if want := replacement + rest; sent != want {
		t.Fatalf("%q: matched %q, sent %q, want %q", target, matched, sent, want)
	}
}

// hasDotSegment says whether p holds a dot segment however a backend reads it: with encoded
// slashes and backslashes as separators, '%2E' as a dot, and ';' parameters dropped.
func hasDotSegment(p string) bool {
	p, _, _ = strings.Cut(p, "?")
	r := strings.NewReplacer("%2F", "/", "%2f", "/", "%5C", "/", "%5c", "/", "\\", "/", "%2E", ".", "%2e", ".")
	for seg := range strings.SplitSeq(r.Replace(p), "/") {
		seg, _, _ = strings.Cut(seg, ";")
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
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
		setForwarding(out, "192.0.2.1:4000", "x.example:8080", &Listener{Port: 80, Scheme: "http"})
		if got := out.Values("X-Forwarded-For"); len(got) != 1 || !strings.HasSuffix(got[0], "192.0.2.1") {
			t.Fatalf("X-Forwarded-For %q does not end with the client", got)
		}
		for k, want := range map[string]string{
			"Forwarded": `for=192.0.2.1;host="x.example:8080";proto=http`, "X-Forwarded-Host": "x.example:8080",
			"X-Forwarded-Port": "80", "X-Forwarded-Proto": "http", "X-Real-Ip": "192.0.2.1",
		} {
			if got := out[k]; len(got) != 1 || got[0] != want {
				t.Fatalf("%s %q, want %q", k, got, want)
			}
		}
	})
}
