package router_test

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

func onlyRoute(t *testing.T, table *router.Table) *router.Route {
	t.Helper()
	p, _ := table.Port(80)
	vh := p.VirtualHosts()[0]
	return vh.Routes()[0]
}

func routeWith(mutate func(r *discoveryv1.Route)) *discoveryv1.Listener {
	r := snaptest.Route("ns/r/0/0", "", snaptest.Prefix("/p"), "ns/app:80")
	mutate(r)
	return snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "", r))
}

// Tests that Compile refuses sets the data plane cannot serve and names the reason.
func TestCompileRefuses(t *testing.T) {
	t.Parallel()
	cert, _ := snaptest.Certificate(t, "ns/cert", "a.example.com")
	cases := []struct {
		name string
		msgs []proto.Message
	}{
		{"an unknown payload type", []proto.Message{wrapperspb.String("x")}},
		{"an invalid path regular expression", []proto.Message{routeWith(func(r *discoveryv1.Route) { r.Match = snaptest.Regex("/(") })}},
		{"an invalid header regular expression", []proto.Message{routeWith(func(r *discoveryv1.Route) {
			r.Match = withHeader(r.Match, regex, "x", "[")
		})}},
		{"a path that does not start with a slash", []proto.Message{routeWith(func(r *discoveryv1.Route) { r.Match = snaptest.Exact("p") })}},
		{"a prefix match on a header", []proto.Message{routeWith(func(r *discoveryv1.Route) {
			r.Match = withHeader(r.Match, discoveryv1.MatchType_MATCH_TYPE_PATH_PREFIX, "x", "y")
		})}},
		{"a redirect with an unknown status", []proto.Message{routeWith(func(r *discoveryv1.Route) {
			r.Filters = []*discoveryv1.Filter{{Kind: &discoveryv1.Filter_Redirect{Redirect: &discoveryv1.Redirect{Scheme: "https", StatusCode: 200}}}}
		})}},
		{"a header value that splits headers", []proto.Message{routeWith(func(r *discoveryv1.Route) {
			r.Filters = []*discoveryv1.Filter{{Kind: &discoveryv1.Filter_RequestHeaders{RequestHeaders: &discoveryv1.HeaderModifier{
				Set: []*discoveryv1.Header{{Name: "X", Value: "a\r\nInjected: 1"}},
			}}}}
		})}},
		{"a prefix replacement without a prefix match", []proto.Message{routeWith(func(r *discoveryv1.Route) {
			r.Match = snaptest.Exact("/p")
			r.Filters = []*discoveryv1.Filter{{Kind: &discoveryv1.Filter_Rewrite{Rewrite: &discoveryv1.Rewrite{
				Path: &discoveryv1.PathModifier{Kind: &discoveryv1.PathModifier_ReplacePrefixMatch{ReplacePrefixMatch: "/q"}},
			}}}}
		})}},
		{"a filter without a kind", []proto.Message{routeWith(func(r *discoveryv1.Route) { r.Filters = []*discoveryv1.Filter{{}} })}},
		{"a backend with a filter other than a header modifier or a rewrite", []proto.Message{routeWith(func(r *discoveryv1.Route) {
			r.Backends[0].Filters = []*discoveryv1.Filter{{Kind: &discoveryv1.Filter_Mirror{Mirror: &discoveryv1.Mirror{Cluster: "ns/app:80", Numerator: 1, Denominator: 1}}}}
		})}},
		{"a backend prefix replacement without a prefix match", []proto.Message{routeWith(func(r *discoveryv1.Route) {
			r.Match = snaptest.Exact("/p")
			r.Backends[0].Filters = []*discoveryv1.Filter{backendRewrite("", prefixModifier("/q"))}
		})}},
		{"a backend rewrite on a route with a rewrite", []proto.Message{routeWith(func(r *discoveryv1.Route) {
			r.Filters = []*discoveryv1.Filter{backendRewrite("a.example.com", nil)}
			r.Backends[0].Filters = []*discoveryv1.Filter{backendRewrite("", prefixModifier("/q"))}
		})}},
		{"two rewrites on a backend", []proto.Message{routeWith(func(r *discoveryv1.Route) {
			r.Backends[0].Filters = []*discoveryv1.Filter{backendRewrite("a.example.com", nil), backendRewrite("b.example.com", nil)}
		})}},
		{"a backend rewrite to a wildcard hostname", []proto.Message{routeWith(func(r *discoveryv1.Route) {
			r.Backends[0].Filters = []*discoveryv1.Filter{backendRewrite("*.example.com", nil)}
		})}},
		{"a backend path replacement with control characters", []proto.Message{routeWith(func(r *discoveryv1.Route) {
			r.Backends[0].Filters = []*discoveryv1.Filter{backendRewrite("", &discoveryv1.PathModifier{
				Kind: &discoveryv1.PathModifier_ReplaceFullPath{ReplaceFullPath: "/a\r\nInjected: 1"},
			})}
		})}},
		{"a backend header value that splits headers", []proto.Message{routeWith(func(r *discoveryv1.Route) {
			r.Backends[0].Filters = []*discoveryv1.Filter{{Kind: &discoveryv1.Filter_ResponseHeaders{ResponseHeaders: &discoveryv1.HeaderModifier{
				Add: []*discoveryv1.Header{{Name: "X", Value: "a\nInjected: 1"}},
			}}}}
		})}},
		{"a CORS origin that is not an origin", []proto.Message{routeWith(func(r *discoveryv1.Route) {
			r.Filters = []*discoveryv1.Filter{{Kind: &discoveryv1.Filter_Cors{Cors: &discoveryv1.Cors{AllowOrigins: []string{"ftp://a.example.com"}}}}}
		})}},
		{"a CORS origin with a wildcard inside its host", []proto.Message{routeWith(func(r *discoveryv1.Route) {
			r.Filters = []*discoveryv1.Filter{{Kind: &discoveryv1.Filter_Cors{Cors: &discoveryv1.Cors{AllowOrigins: []string{"https://a.*.example.com"}}}}}
		})}},
		{"a CORS header name that is not a token", []proto.Message{routeWith(func(r *discoveryv1.Route) {
			r.Filters = []*discoveryv1.Filter{{Kind: &discoveryv1.Filter_Cors{Cors: &discoveryv1.Cors{AllowHeaders: []string{"x\r\ny"}}}}}
		})}},
		{"two CORS filters", []proto.Message{routeWith(func(r *discoveryv1.Route) {
			cors := &discoveryv1.Filter{Kind: &discoveryv1.Filter_Cors{Cors: &discoveryv1.Cors{AllowOrigins: []string{"*"}}}}
			r.Filters = []*discoveryv1.Filter{cors, cors}
		})}},
		{"a negative timeout", []proto.Message{routeWith(func(r *discoveryv1.Route) {
			r.Timeouts = &discoveryv1.Timeouts{Request: durationpb.New(-time.Second)}
		})}},
		{"a direct status out of range", []proto.Message{routeWith(func(r *discoveryv1.Route) { r.DirectStatus = 1000 })}},
		{"a listener without a protocol", []proto.Message{snaptest.Listener("ns/gw", 80, 0)}},
		{"a listener on port zero", []proto.Message{snaptest.HTTP("ns/gw", 0)}},
		{"an HTTPS virtual host without certificates", []proto.Message{
			snaptest.Listener("ns/gw", 443, discoveryv1.Protocol_PROTOCOL_HTTPS, snaptest.VHost("https", "")),
		}},
		{"an HTTPS virtual host naming a certificate the set lacks", []proto.Message{
			snaptest.Listener("ns/gw", 443, discoveryv1.Protocol_PROTOCOL_HTTPS,
				&discoveryv1.VirtualHost{Name: "https", Certificates: []string{"ns/missing"}}),
		}},
		{"a TLS passthrough virtual host with certificates", []proto.Message{
			cert,
			snaptest.Listener("ns/gw", 443, discoveryv1.Protocol_PROTOCOL_TLS_PASSTHROUGH,
				&discoveryv1.VirtualHost{Name: "tls", Certificates: []string{"ns/cert"}}),
		}},
		{"a TCP virtual host with certificates", []proto.Message{
			cert,
			snaptest.Listener("ns/gw", 9000, discoveryv1.Protocol_PROTOCOL_TCP,
				&discoveryv1.VirtualHost{Name: "tcp", Certificates: []string{"ns/cert"}}),
		}},
		{"a TLS virtual host naming a certificate the set lacks", []proto.Message{
			snaptest.Listener("ns/gw", 443, discoveryv1.Protocol_PROTOCOL_TLS,
				&discoveryv1.VirtualHost{Name: "tls", Certificates: []string{"ns/missing"}}),
		}},
		{"a certificate whose key does not parse", []proto.Message{&discoveryv1.Certificate{
			Name: "ns/bad", CertificateChainPem: cert.GetCertificateChainPem(), PrivateKeyPem: []byte("junk"),
		}}},
		{"an endpoint without a port", []proto.Message{&discoveryv1.Cluster{
			Name: "ns/app:80", Endpoints: []*discoveryv1.Endpoint{{Address: "10.0.0.1"}},
		}}},
		{"a cluster with an unknown upstream protocol", []proto.Message{&discoveryv1.Cluster{
			Name: "ns/app:80", UpstreamProtocol: 99,
		}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := router.Compile(snaptest.Seq(snaptest.Resources(t, tc.msgs...)))
			if !errors.Is(err, router.ErrInvalid) {
				t.Errorf("got %v, want ErrInvalid", err)
			}
		})
	}
}

// Tests that Compile refuses a key that does not name its payload, and a key used twice.
func TestCompileRefusesKeys(t *testing.T) {
	t.Parallel()
	res := snaptest.Resources(t, snaptest.HTTP("ns/gw", 80))
	renamed := []*discoveryv1.Resource{{Key: "listener/ns/other/80", Payload: res[0].GetPayload()}}
	twice := []*discoveryv1.Resource{res[0], res[0]}
	for name, rs := range map[string][]*discoveryv1.Resource{"renamed": renamed, "twice": twice} {
		if _, err := router.Compile(snaptest.Seq(rs)); !errors.Is(err, router.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
	garbage := []*discoveryv1.Resource{{Key: "listener/x", Payload: &anypb.Any{TypeUrl: "type.googleapis.com/coxswain.discovery.v1.Listener", Value: []byte{0xff}}}}
	if _, err := router.Compile(snaptest.Seq(garbage)); err == nil {
		t.Error("a payload that does not unmarshal was accepted")
	}
}

// Tests how backends compile: a missing cluster answers 500, weight zero is dropped, an error
// status is kept, and a cluster without endpoints is kept empty (the data plane answers 503).
func TestCompileBackends(t *testing.T) {
	t.Parallel()
	l := routeWith(func(r *discoveryv1.Route) {
		r.Backends = []*discoveryv1.WeightedBackend{
			{Cluster: "ns/app:80", Weight: 1},
			{Cluster: "ns/missing:80", Weight: 2},
			{Cluster: "ns/app:80", Weight: 0},
			{ErrorStatus: 500, Weight: 3},
			{Cluster: "ns/empty:80", Weight: 4},
		}
	})
	table := compile(t, l, snaptest.Cluster(t, "ns/app:80", "127.0.0.1:1"), &discoveryv1.Cluster{Name: "ns/empty:80"})
	got := onlyRoute(t, table).Backends
	if len(got) != 4 {
		t.Fatalf("got %d backends, want 4", len(got))
	}
	if got[0].Cluster == nil || got[0].Cluster.Name != "ns/app:80" || table.Cluster(got[0].Cluster).Endpoints[0].Address != "127.0.0.1:1" {
		t.Errorf("resolved backend: %+v", got[0])
	}
	if got[1].Cluster != nil || got[1].ErrorStatus != 500 {
		t.Errorf("a backend naming a missing cluster: %+v, want error status 500", got[1])
	}
	if got[2].ErrorStatus != 500 || got[3].Cluster == nil || len(table.Cluster(got[3].Cluster).Endpoints) != 0 {
		t.Errorf("error and empty backends: %+v %+v", got[2], got[3])
	}
}

// Tests that weighted choice splits requests by weight within 2% over 100,000 seeded picks.
func TestPickSplitsByWeight(t *testing.T) {
	t.Parallel()
	l := routeWith(func(r *discoveryv1.Route) {
		r.Backends = []*discoveryv1.WeightedBackend{
			{Cluster: "ns/a:80", Weight: 1}, {Cluster: "ns/b:80", Weight: 3}, {Cluster: "ns/c:80", Weight: 6},
		}
	})
	table := compile(t, l, &discoveryv1.Cluster{Name: "ns/a:80"}, &discoveryv1.Cluster{Name: "ns/b:80"}, &discoveryv1.Cluster{Name: "ns/c:80"})
	route := onlyRoute(t, table)
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 100000
	counts := map[string]int{}
	for range n {
		counts[route.Pick(rng.Uint64()).Cluster.Name]++
	}
	for name, want := range map[string]float64{"ns/a:80": 0.1, "ns/b:80": 0.3, "ns/c:80": 0.6} {
		if got := float64(counts[name]) / n; got < want-0.02 || got > want+0.02 {
			t.Errorf("%s took %.3f of requests, want %.2f", name, got, want)
		}
	}
}

// Tests that a mirror samples its fraction of requests.
func TestMirrorSamples(t *testing.T) {
	t.Parallel()
	m := &router.Mirror{Numerator: 1, Denominator: 4}
	rng := rand.New(rand.NewPCG(3, 4))
	taken := 0
	for range 40000 {
		if m.Sample(rng.Uint64()) {
			taken++
		}
	}
	if taken < 9500 || taken > 10500 {
		t.Errorf("mirror took %d of 40000, want about 10000", taken)
	}
}

// Tests the path replacements of URLRewrite and RequestRedirect.
func TestReplacePath(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, prefix, replacement, path, want string
		full                                  bool
	}{
		{"a full replacement ignores the path", "/old", "/new", "/old/x", "/new", true},
		{"a prefix replacement keeps the rest", "/old", "/new", "/old/x/y", "/new/x/y", false},
		{"a prefix replacement of the whole path", "/old", "/new", "/old", "/new", false},
		{"replacing with a slash strips the prefix", "/old", "/", "/old/x", "/x", false},
		{"replacing the whole path with a slash gives a slash", "/old", "/", "/old", "/", false},
		{"a trailing slash on the path is kept", "/old", "/new", "/old/", "/new/", false},
		{"a trailing slash on the replacement is not doubled", "/old/", "/new/", "/old/x", "/new/x", false},
		{"the root prefix is replaced", "/", "/new", "/x", "/new/x", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			kind := &discoveryv1.PathModifier{Kind: &discoveryv1.PathModifier_ReplacePrefixMatch{ReplacePrefixMatch: tc.replacement}}
			if tc.full {
				kind = &discoveryv1.PathModifier{Kind: &discoveryv1.PathModifier_ReplaceFullPath{ReplaceFullPath: tc.replacement}}
			}
			l := routeWith(func(r *discoveryv1.Route) {
				r.Match = snaptest.Prefix(tc.prefix)
				r.Filters = []*discoveryv1.Filter{{Kind: &discoveryv1.Filter_Rewrite{Rewrite: &discoveryv1.Rewrite{Path: kind}}}}
			})
			route := onlyRoute(t, compile(t, l))
			if got := route.Rewrite.Path.ReplacePath(route, tc.path); got != tc.want {
				t.Errorf("%s: got %s, want %s", tc.path, got, tc.want)
			}
		})
	}
}

func backendRewrite(hostname string, path *discoveryv1.PathModifier) *discoveryv1.Filter {
	return &discoveryv1.Filter{Kind: &discoveryv1.Filter_Rewrite{Rewrite: &discoveryv1.Rewrite{Hostname: hostname, Path: path}}}
}

func prefixModifier(v string) *discoveryv1.PathModifier {
	return &discoveryv1.PathModifier{Kind: &discoveryv1.PathModifier_ReplacePrefixMatch{ReplacePrefixMatch: v}}
}

// Tests that a backend's rewrite compiles onto that backend only, with its prefix replacement
// taken against the route's PathPrefix match and its full replacement in the router's form of
// paths, next to a backend without filters and a route without a rewrite of its own.
func TestCompileBackendRewrite(t *testing.T) {
	t.Parallel()
	l := routeWith(func(r *discoveryv1.Route) {
		r.Match = snaptest.Prefix("/prefix/")
		r.Backends = []*discoveryv1.WeightedBackend{
			{Cluster: "ns/app:80", Weight: 1, Filters: []*discoveryv1.Filter{
				{Kind: &discoveryv1.Filter_RequestHeaders{RequestHeaders: &discoveryv1.HeaderModifier{Set: []*discoveryv1.Header{{Name: "X-B", Value: "1"}}}}},
				backendRewrite("app.internal", prefixModifier("/rewritten-prefix")),
			}},
			{Cluster: "ns/other:80", Weight: 1, Filters: []*discoveryv1.Filter{
				backendRewrite("", &discoveryv1.PathModifier{Kind: &discoveryv1.PathModifier_ReplaceFullPath{ReplaceFullPath: "/%7Efull"}}),
			}},
			{Cluster: "ns/plain:80", Weight: 1},
		}
	})
	route := onlyRoute(t, compile(t, l, snaptest.Cluster(t, "ns/app:80", "10.0.0.1:80"),
		snaptest.Cluster(t, "ns/other:80", "10.0.0.2:80"), snaptest.Cluster(t, "ns/plain:80", "10.0.0.3:80")))
	if route.Rewrite != nil || len(route.Backends) != 3 {
		t.Fatalf("route rewrite %+v, %d backends", route.Rewrite, len(route.Backends))
	}
	for i, b := range route.Backends {
		if b.Cluster == nil || b.ErrorStatus != 0 {
			t.Fatalf("backend %d: %+v, want its cluster", i, b)
		}
	}
	prefixed, full, plain := route.Backends[0].Filters, route.Backends[1].Filters, route.Backends[2].Filters
	if prefixed == nil || prefixed.Rewrite == nil || prefixed.Rewrite.Hostname != "app.internal" || len(prefixed.RequestHeaders) != 1 {
		t.Fatalf("first backend's filters: %+v", prefixed)
	}
	if got := prefixed.Rewrite.Path.ReplacePath(route, "/prefix/original"); got != "/rewritten-prefix/original" {
		t.Errorf("prefix replacement of /prefix/original: got %s", got)
	}
	if full == nil || full.Rewrite == nil || full.Rewrite.Hostname != "" {
		t.Fatalf("second backend's filters: %+v", full)
	}
	if got := full.Rewrite.Path.ReplacePath(route, "/prefix/original"); got != "/~full" {
		t.Errorf("full replacement: got %s, want /~full", got)
	}
	if plain != nil {
		t.Errorf("a backend without filters got %+v", plain)
	}
}

// Tests that a listener whose protocol differs from the port's first listener is skipped, not
// refused, so one Gateway's mistake cannot take the port from the others.
func TestCompileSkipsProtocolConflicts(t *testing.T) {
	t.Parallel()
	cert, _ := snaptest.Certificate(t, "ns/cert", "a.example.com")
	https := snaptest.Listener("ns/b", 80, discoveryv1.Protocol_PROTOCOL_HTTPS,
		&discoveryv1.VirtualHost{Name: "https", Certificates: []string{"ns/cert"}})
	table := compile(t, snaptest.HTTP("ns/a", 80), https, cert)
	p, _ := table.Port(80)
	if p.Protocol != router.HTTP || len(table.Skipped) != 1 || table.Skipped[0] != "ns/b/80" {
		t.Errorf("port %v, skipped %v", p.Protocol, table.Skipped)
	}
}
