package router_test

import (
	"net/url"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// request is a router.Request over plain maps.
type request struct {
	headers map[string]string
	query   url.Values
}

func (r request) Header(name string) (string, bool) {
	v, ok := r.headers[name]
	return v, ok
}

func (r request) Query(name string) (string, bool) {
	if vs, ok := r.query[name]; ok {
		return vs[0], true
	}
	return "", false
}

func compile(t testing.TB, msgs ...proto.Message) *router.Table {
	t.Helper()
	table, err := router.Compile(snaptest.Seq(snaptest.Resources(t, msgs...)))
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	return table
}

// match routes a request given as "METHOD host/path?query" with headers "name: value".
func match(t *testing.T, table *router.Table, port uint32, target string, headers ...string) string {
	t.Helper()
	method, rest, _ := strings.Cut(target, " ")
	host, pathQuery, _ := strings.Cut(rest, "/")
	path, query, _ := strings.Cut("/"+pathQuery, "?")
	q, _ := url.ParseQuery(query)
	req := request{headers: map[string]string{}, query: q}
	for _, h := range headers {
		name, value, _ := strings.Cut(h, ": ")
		req.headers[strings.ToLower(name)] = value
	}
	p, ok := table.Port(port)
	if !ok {
		return "no port"
	}
	host = router.NormalizeHost(host)
	vh, ok := p.VirtualHost(host)
	if !ok {
		return "404"
	}
	r := vh.Match(host, method, path, req)
	if r == nil {
		return "404"
	}
	return r.Name
}

func withMethod(m *discoveryv1.RouteMatch, method string) *discoveryv1.RouteMatch {
	m.Method = method
	return m
}

func withHeader(m *discoveryv1.RouteMatch, t discoveryv1.MatchType, name, value string) *discoveryv1.RouteMatch {
	m.Headers = append(m.Headers, &discoveryv1.ValueMatch{Type: t, Name: name, Value: value})
	return m
}

func withQuery(m *discoveryv1.RouteMatch, t discoveryv1.MatchType, name, value string) *discoveryv1.RouteMatch {
	m.QueryParams = append(m.QueryParams, &discoveryv1.ValueMatch{Type: t, Name: name, Value: value})
	return m
}

const (
	exact = discoveryv1.MatchType_MATCH_TYPE_EXACT
	regex = discoveryv1.MatchType_MATCH_TYPE_REGULAR_EXPRESSION
)

// Tests that the first route in compiled order wins, whatever kind of path match it has.
func TestMatchFollowsCompiledOrder(t *testing.T) {
	t.Parallel()
	table := compile(t,
		snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "",
			snaptest.Route("exact", "", snaptest.Exact("/a"), "c"),
			snaptest.Route("regex", "", snaptest.Regex("/a[0-9]+(/.*)?"), "c"),
			snaptest.Route("prefix-long", "", snaptest.Prefix("/a/b/"), "c"),
			snaptest.Route("prefix", "", snaptest.Prefix("/a"), "c"),
			snaptest.Route("method", "", withMethod(snaptest.Prefix("/m"), "POST"), "c"),
			snaptest.Route("header", "", withHeader(snaptest.Prefix("/h"), exact, "x-env", "prod"), "c"),
			snaptest.Route("header-regex", "", withHeader(snaptest.Prefix("/h"), regex, "x-env", "stag(e|ing)"), "c"),
			snaptest.Route("query", "", withQuery(snaptest.Prefix("/q"), exact, "v", "2"), "c"),
			snaptest.Route("query-regex", "", withQuery(snaptest.Prefix("/q"), regex, "v", "[0-9]"), "c"),
			snaptest.Route("root", "", snaptest.Prefix("/"), "c"),
		)),
	)
	cases := []struct {
		name    string
		target  string
		headers []string
		want    string
	}{
		{"an exact path beats the prefixes that also match it", "GET x/a", nil, "exact"},
		{"a regex listed before a prefix beats it", "GET x/a12/z", nil, "regex"},
		{"a regex must match the whole path", "GET x/a12z", nil, "root"},
		{"a longer prefix listed first wins", "GET x/a/b/c", nil, "prefix-long"},
		{"a prefix value's trailing slash is ignored", "GET x/a/b", nil, "prefix-long"},
		{"a prefix matches whole path elements only", "GET x/abc", nil, "root"},
		{"a prefix matches its path with a trailing slash", "GET x/a/", nil, "prefix"},
		{"a method match needs the method", "GET x/m", nil, "root"},
		{"a method match takes its method", "POST x/m", nil, "method"},
		{"an exact header match takes its value", "GET x/h", []string{"X-Env: prod"}, "header"},
		{"a header regex match takes a value it matches", "GET x/h", []string{"X-Env: staging"}, "header-regex"},
		{"a header match needs the header", "GET x/h", nil, "root"},
		{"an exact query match takes its value", "GET x/q?v=2", nil, "query"},
		{"a query regex match takes a value it matches", "GET x/q?v=7", nil, "query-regex"},
		{"a query match refuses another value", "GET x/q?v=22", nil, "root"},
		{"the root prefix takes everything else", "GET x/zzz", nil, "root"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := match(t, table, 80, tc.target, tc.headers...); got != tc.want {
				t.Errorf("%s: got %s, want %s", tc.target, got, tc.want)
			}
		})
	}
}

// Tests that virtual hosts and route hostnames select exact names before wildcards before the
// catch-all, and that Gateways sharing a port keep their virtual hosts apart.
func TestMatchHosts(t *testing.T) {
	t.Parallel()
	table := compile(t,
		snaptest.HTTP("ns/a", 80,
			snaptest.VHost("exact", "a.example.com", snaptest.Route("a-exact", "a.example.com", snaptest.Prefix("/"), "c")),
			snaptest.VHost("wild", "*.example.com",
				snaptest.Route("a-deep", "*.b.example.com", snaptest.Prefix("/"), "c"),
				snaptest.Route("a-wild", "*.example.com", snaptest.Prefix("/"), "c")),
		),
		snaptest.HTTP("ns/b", 80,
			snaptest.VHost("exact", "a.example.com", snaptest.Route("b-shadowed", "a.example.com", snaptest.Prefix("/"), "c")),
			snaptest.VHost("other", "b.example.org", snaptest.Route("b-exact", "b.example.org", snaptest.Prefix("/"), "c")),
			snaptest.VHost("any", "", snaptest.Route("b-any", "", snaptest.Prefix("/"), "c")),
		),
	)
	cases := []struct{ name, target, want string }{
		{"an exact hostname wins over a wildcard", "GET a.example.com/", "a-exact"},
		{"the host header's port and case are ignored", "GET A.Example.COM:8080/", "a-exact"},
		{"a wildcard needs at least one more label", "GET example.com/", "b-any"},
		{"the longest wildcard route hostname wins", "GET x.b.example.com/", "a-deep"},
		{"a shorter wildcard takes the rest", "GET x.example.com/", "a-wild"},
		{"another Gateway's virtual host on the port is served", "GET b.example.org/", "b-exact"},
		{"the catch-all takes unknown hosts", "GET unknown.test/", "b-any"},
		{"between equal hostnames the first listener key wins", "GET a.example.com/x", "a-exact"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := match(t, table, 80, tc.target); got != tc.want {
				t.Errorf("%s: got %s, want %s", tc.target, got, tc.want)
			}
		})
	}
}

// Tests that a request matching no virtual host or no route finds nothing (the data plane
// answers 404).
func TestMatchNothing(t *testing.T) {
	t.Parallel()
	table := compile(t, snaptest.HTTP("ns/gw", 80,
		snaptest.VHost("a", "a.example.com", snaptest.Route("r", "a.example.com", snaptest.Exact("/only"), "c"))))
	for _, target := range []string{"GET b.example.com/only", "GET a.example.com/other"} {
		if got := match(t, table, 80, target); got != "404" {
			t.Errorf("%s: got %s, want 404", target, got)
		}
	}
	if got := match(t, table, 81, "GET a.example.com/only"); got != "no port" {
		t.Errorf("port 81: got %s", got)
	}
}
