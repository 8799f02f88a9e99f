package dataplane_test

import (
	"slices"
	"strings"
	"testing"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// pathRoutes applies the table the path tests attack: /rw rewrites its prefix to /new, /brw
// too but on its backend, /rd redirects to /target in place of its prefix, /admin is closed
// (403 from the proxy itself), and everything else goes to the catch-all's backend, which is be
// for /rw and /brw too. It returns the proxy's address.
func pathRoutes(t *testing.T, d *dataplane.DataPlane, be *rawBackend) string {
	t.Helper()
	rw := snaptest.Route("ns/rw/0/0", "", snaptest.Prefix("/rw"), "ns/app:80")
	rw.Filters = []*discoveryv1.Filter{filter(&discoveryv1.Filter_Rewrite{Rewrite: &discoveryv1.Rewrite{Path: prefixReplace("/new")}})}
	brw := snaptest.Route("ns/brw/0/0", "", snaptest.Prefix("/brw"), "ns/app:80")
	brw.Backends[0].Filters = []*discoveryv1.Filter{filter(&discoveryv1.Filter_Rewrite{Rewrite: &discoveryv1.Rewrite{Path: prefixReplace("/new")}})}
	rd := &discoveryv1.Route{Name: "ns/rd/0/0", Match: snaptest.Prefix("/rd"), Filters: []*discoveryv1.Filter{
		filter(&discoveryv1.Filter_Redirect{Redirect: &discoveryv1.Redirect{Scheme: "http", StatusCode: 302, Path: prefixReplace("/target")}}),
	}}
	admin := &discoveryv1.Route{Name: "ns/admin/0/0", Match: snaptest.Prefix("/admin"), DirectStatus: 403}
	all := snaptest.Route("ns/all/0/0", "", snaptest.Prefix("/"), "ns/app:80")
	apply(t, d, snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "", rw, brw, rd, admin, all)), snaptest.Cluster(t, "ns/app:80", be.addr()))
	return addr(t, d, 80)
}

// received returns the request targets the backend saw, in order.
func (b *rawBackend) targets() []string {
	var out []string
	for _, r := range b.requests() {
		out = append(out, r.RequestURI)
	}
	return out
}

// hasDotSegment says whether p, read as a backend that decodes %2F and %5C and takes
// backslashes and ';' parameters as Tomcat does might read it, holds a dot segment.
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

// Tests that a prefix rewrite, a route's or a backend's, cannot be escaped with encoded
// separators: no request makes the backend receive a dot segment, whatever decoding it does,
// and the paths that try are refused with 400 before routing; an encoded slash that makes no
// dot segment is forwarded as it came, encoded, under the rewritten prefix, and a redirect
// keeps it encoded too.
func TestRewriteCannotBeEscaped(t *testing.T) {
	t.Parallel()
	be := newRawBackend(t, answerEach)
	d := start(t, dataplane.Options{})
	proxy := pathRoutes(t, d, be)
	for _, target := range []string{
		"/rw%2F..%2Fadmin",
		"/rw%2f..%2fadmin",
		"/rw/..%2Fadmin",
		"/rw%2F%2E%2E%2Fadmin",
		"/rw/x%2F..%2F..%2Fadmin",
		"/rw%5C..%5Cadmin",
		`/rw\..\admin`,
		"/rw/..;/admin",
		"/rw/.;x/admin",
		"/brw%2F..%2Fadmin",
		"/brw/..%2Fadmin",
		"/brw%5C..%5Cadmin",
		"/brw/..;/admin",
		"/rd%2F..%2Fadmin",
		"/rd/%2E%2E%2F%2E%2E%2Fadmin",
	} {
		t.Run(target, func(t *testing.T) {
			c, br := rawConn(t, proxy)
			resp, _ := roundTrip(t, c, br, "GET "+target+" HTTP/1.1\r\nHost: x\r\n\r\n")
			if resp.StatusCode != 400 {
				t.Errorf("got %d, want 400; Location %q", resp.StatusCode, resp.Header.Get("Location"))
			}
			if loc := resp.Header.Get("Location"); hasDotSegment(loc) {
				t.Errorf("redirected to %q", loc)
			}
		})
	}
	for _, got := range be.targets() {
		if hasDotSegment(got) {
			t.Errorf("backend received %q", got)
		}
	}
	if got := be.targets(); len(got) != 0 {
		t.Errorf("backend received %q, want nothing", got)
	}

	for _, tc := range []struct{ target, want string }{
		{"/rw/a%2Fb", "/new/a%2Fb"},
		{"/rw/a%2fb?q=1", "/new/a%2Fb?q=1"},
		{"/rw/caf%c3%a9", "/new/caf%C3%A9"},
		{"/rw/%7euser/a%20b", "/new/~user/a%20b"},
		{"/rw/a/./b/../c", "/new/a/c"},
		{"/rw", "/new"},
		{"/brw/a%2Fb?q=1", "/new/a%2Fb?q=1"},
		{"/brw/%7euser/a%20b", "/new/~user/a%20b"},
		{"/brw/a/./b/../c", "/new/a/c"},
		{"/brw", "/new"},
	} {
		c, br := rawConn(t, proxy)
		if resp, body := roundTrip(t, c, br, "GET "+tc.target+" HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 200 || body != "target="+tc.want {
			t.Errorf("%s: got %d %q, want the backend to receive %s", tc.target, resp.StatusCode, body, tc.want)
		}
	}
	c, br := rawConn(t, proxy)
	resp, _ := roundTrip(t, c, br, "GET /rd/a%2Fb/caf%C3%A9?q=1 HTTP/1.1\r\nHost: x\r\n\r\n")
	if loc := resp.Header.Get("Location"); resp.StatusCode != 302 || loc != "http://x/target/a%2Fb/caf%C3%A9?q=1" {
		t.Errorf("redirect got %d to %q, want 302 to http://x/target/a%%2Fb/caf%%C3%%A9?q=1", resp.StatusCode, loc)
	}
}

// Tests that encoded separators and path parameters cannot take a request past a route: a
// path that a decoding backend would read as one under /admin never reaches the catch-all's
// backend, over HTTP/1.1 and HTTP/2; one that reads the same either way is forwarded encoded.
func TestEncodedSeparatorsDoNotBypassARoute(t *testing.T) {
	t.Parallel()
	be := newRawBackend(t, answerEach)
	d := start(t, dataplane.Options{})
	proxy := pathRoutes(t, d, be)
	attacks := []string{
		"/x/..%2Fadmin",
		"/%2Fadmin",
		"/%5Cadmin",
		"/admin%2Fsecret",
		"/admin%5Csecret",
		"/admin;x/secret",
		"/x/..;/admin",
		"/;x/admin",
	}
	for _, target := range attacks {
		c, br := rawConn(t, proxy)
		resp, _ := roundTrip(t, c, br, "GET "+target+" HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp.StatusCode != 400 && resp.StatusCode != 403 {
			t.Errorf("HTTP/1.1 %s: got %d, want 400 or the /admin route's 403", target, resp.StatusCode)
		}
	}
	h := dialH2(t, proxy)
	for i, target := range attacks {
		id := uint32(2*i + 1)
		h.request(id, true, get("x", target)...)
		if got := h.await(id); got.status != 400 && got.status != 403 {
			t.Errorf("HTTP/2 %s: got %d (reset %v), want 400 or 403", target, got.status, got.reset)
		}
	}
	if got := be.targets(); len(got) != 0 {
		t.Errorf("backend received %q, want nothing", got)
	}
	for _, tc := range []struct{ target, want string }{
		{"/api/projects/group%2Fproject", "/api/projects/group%2Fproject"},
		{"/files/a%5Cb", "/files/a%5Cb"},
		{"/app;jsessionid=1", "/app;jsessionid=1"},
		{"/%61dmin%2Fx/../y", "/y"},
	} {
		c, br := rawConn(t, proxy)
		if resp, body := roundTrip(t, c, br, "GET "+tc.target+" HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 200 || body != "target="+tc.want {
			t.Errorf("%s: got %d %q, want the backend to receive %s", tc.target, resp.StatusCode, body, tc.want)
		}
	}
	if got := be.targets(); !slices.Equal(got, []string{"/api/projects/group%2Fproject", "/files/a%5Cb", "/app;jsessionid=1", "/y"}) {
		t.Errorf("backend received %q", got)
	}
}

// Tests that a query the RFC 3986 grammar does not allow never reaches a backend as it came:
// an HTTP/2 :path whose query holds spaces (which would split the HTTP/1.1 request line) or
// bytes of 0x80 and above is forwarded percent-encoded, so the backend parses one request
// line with the same query, and the routes match the same parameters.
func TestQueryIsEncodedUpstream(t *testing.T) {
	t.Parallel()
	be := newRawBackend(t, answerEach)
	d := start(t, dataplane.Options{})
	proxy := routeAll(t, d, be.addr(), func(r *discoveryv1.Route) {
		r.Match.QueryParams = []*discoveryv1.ValueMatch{{Name: "a", Value: "1 /admin/secret HTTP/1.1", Type: discoveryv1.MatchType_MATCH_TYPE_EXACT}}
	})
	h := dialH2(t, proxy)
	h.request(1, true, get("x", "/q?a=1 /admin/secret HTTP/1.1")...)
	if got := h.await(1); got.status != 200 || string(got.body) != "target=/q?a=1%20/admin/secret%20HTTP/1.1" {
		t.Errorf("query with spaces: got %d %q", got.status, got.body)
	}
	h.request(3, true, get("x", "/q?a=1 /admin/secret HTTP/1.1&name=caf\xc3\xa9&raw=\xff<\"|>")...)
	if got := h.await(3); got.status != 200 || string(got.body) != "target=/q?a=1%20/admin/secret%20HTTP/1.1&name=caf%C3%A9&raw=%FF%3C%22%7C%3E" {
		t.Errorf("query with bytes above 0x7f: got %d %q", got.status, got.body)
	}
	c, br := rawConn(t, proxy)
	resp, body := roundTrip(t, c, br, "GET /q?a=1%20/admin/secret%20HTTP/1.1&n=caf\xc3\xa9&p=100% HTTP/1.1\r\nHost: x\r\n\r\n")
	switch {
	case running.server == http1.EngineNative:
		// The native parser refuses a target outside the RFC 3986 grammar; net/http takes it
		// and the proxy encodes it.
		if resp.StatusCode != 400 {
			t.Errorf("HTTP/1.1 query with raw bytes above 0x7f: got %d %q, want 400", resp.StatusCode, body)
		}
	case resp.StatusCode != 200 || body != "target=/q?a=1%20/admin/secret%20HTTP/1.1&n=caf%C3%A9&p=100%25":
		t.Errorf("HTTP/1.1 query with raw bytes above 0x7f: got %d %q", resp.StatusCode, body)
	}
	for _, got := range be.requests() {
		if strings.ContainsFunc(got.RequestURI, func(r rune) bool { return r <= ' ' || r >= 0x7f }) || got.Proto != "HTTP/1.1" {
			t.Errorf("backend received %q over %s", got.RequestURI, got.Proto)
		}
	}
}
