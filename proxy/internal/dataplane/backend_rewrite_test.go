package dataplane_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
	"coxswain.dev/coxswain/proxy/internal/dataplane/upstream"
)

func fullReplace(v string) *discoveryv1.PathModifier {
	return &discoveryv1.PathModifier{Kind: &discoveryv1.PathModifier_ReplaceFullPath{ReplaceFullPath: v}}
}

func rewriteFilter(hostname string, path *discoveryv1.PathModifier) *discoveryv1.Filter {
	return filter(&discoveryv1.Filter_Rewrite{Rewrite: &discoveryv1.Rewrite{Hostname: hostname, Path: path}})
}

// target is what a recording server got: the request target and the Host.
type target struct{ uri, host string }

// recordingBackend starts a server that answers status to every request and records what it got.
func recordingBackend(t *testing.T, status int) (*httptest.Server, func() []target) {
	t.Helper()
	var mu sync.Mutex
	var got []target
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, target{uri: r.RequestURI, host: r.Host})
		mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []target {
		mu.Lock()
		defer mu.Unlock()
		return append([]target(nil), got...)
	}
}

// Tests that a backend's URLRewrite changes the path and the Host of exactly the requests that
// backend gets, after the route's filters, with the query kept: of two backends of one rule
// only the one with the rewrite sees the rewritten request, and the rule's mirror copies carry
// the request as the route left it. The conformance test's two rules (a full path and a
// prefix replacement on a backendRef) are among the routes.
func TestBackendURLRewrite(t *testing.T) {
	t.Parallel()
	a, na := backend(t, "a")
	b, nb := backend(t, "b")
	mirror, mirrored := recordingBackend(t, http.StatusOK)
	d := start(t, dataplane.Options{})
	split := &discoveryv1.Route{
		Name: "ns/split/0/0", Match: snaptest.Prefix("/prefix"),
		Filters: []*discoveryv1.Filter{
			filter(&discoveryv1.Filter_RequestHeaders{RequestHeaders: &discoveryv1.HeaderModifier{
				Set: []*discoveryv1.Header{setHeader("X-Route", "split")},
			}}),
			filter(&discoveryv1.Filter_Mirror{Mirror: &discoveryv1.Mirror{Cluster: "ns/mirror:80", Numerator: 1, Denominator: 1}}),
		},
		Backends: []*discoveryv1.WeightedBackend{
			{Cluster: "ns/a:80", Weight: 50, Filters: []*discoveryv1.Filter{
				rewriteFilter("a.internal", prefixReplace("/rewritten-prefix")),
			}},
			{Cluster: "ns/b:80", Weight: 50},
		},
	}
	full := snaptest.Route("ns/full/0/0", "", snaptest.Prefix("/full"), "ns/a:80")
	full.Backends[0].Filters = []*discoveryv1.Filter{rewriteFilter("", fullReplace("/rewritten-full"))}
	apply(t, d, snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "", split, full)),
		snaptest.Cluster(t, "ns/a:80", hostPort(a)), snaptest.Cluster(t, "ns/b:80", hostPort(b)),
		snaptest.Cluster(t, "ns/mirror:80", hostPort(mirror)))
	c := client(addr(t, d, 80))

	t.Run("a full path replacement on the only backend", func(t *testing.T) {
		r := do(t, c, "GET", "http://www.example.com/full/original?q=1")
		if r.status != 200 || r.echo.Backend != "a" || r.echo.URI != "/rewritten-full?q=1" || r.echo.Host != "www.example.com" {
			t.Errorf("got %d %+v, want a to see /rewritten-full?q=1 for www.example.com", r.status, r.echo)
		}
	})
	t.Run("two backends of one rule, one with a rewrite", func(t *testing.T) {
		before := na.Load()
		const n = 100
		for i := range n {
			r := do(t, c, "GET", "http://www.example.com/prefix/original?q=1")
			if r.status != 200 || http.Header(r.echo.Headers).Get("X-Route") != "split" {
				t.Fatalf("request %d: %d %+v", i, r.status, r.echo)
			}
			want := target{uri: "/prefix/original?q=1", host: "www.example.com"}
			if r.echo.Backend == "a" {
				want = target{uri: "/rewritten-prefix/original?q=1", host: "a.internal"}
			}
			if got := (target{uri: r.echo.URI, host: r.echo.Host}); got != want {
				t.Fatalf("request %d to %s: got %+v, want %+v", i, r.echo.Backend, got, want)
			}
		}
		if a, b := na.Load()-before, nb.Load(); a+b != n || a < 30 || b < 30 {
			t.Errorf("a took %d and b %d of %d, want about half each", a, b, n)
		}
		eventually(t, "the mirror got every copy", func() bool { return len(mirrored()) == n })
		for i, m := range mirrored() {
			if m != (target{uri: "/prefix/original?q=1", host: "www.example.com"}) {
				t.Fatalf("mirror copy %d took a backend's rewrite: %+v", i, m)
			}
		}
	})
}

// Tests that a retry sends the backend's rewritten request again: every attempt, on the
// endpoint that fails and on the next one, sees the rewritten path and Host.
func TestBackendURLRewriteRetried(t *testing.T) {
	t.Parallel()
	failing, failed := recordingBackend(t, http.StatusServiceUnavailable)
	healthy, answered := recordingBackend(t, http.StatusOK)
	d := start(t, dataplane.Options{Upstream: upstream.Options{RetryBudgetMinPerSecond: 1000}})
	r := snaptest.Route("ns/r/0/0", "", snaptest.Prefix("/prefix"), "ns/app:80")
	r.Backends[0].Filters = []*discoveryv1.Filter{rewriteFilter("app.internal", prefixReplace("/rewritten-prefix"))}
	withRetry([]uint32{503}, 1, 1)(r)
	apply(t, d, snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "", r)),
		snaptest.Cluster(t, "ns/app:80", hostPort(failing), hostPort(healthy)))
	c := client(addr(t, d, 80))
	const n = 10
	for i := range n {
		if got := do(t, c, "GET", "http://www.example.com/prefix/x?q=1"); got.status != 200 {
			t.Fatalf("request %d: got %d, want 200 from the retry on the healthy endpoint", i, got.status)
		}
	}
	if len(failed()) == 0 || len(answered()) != n {
		t.Fatalf("the failing endpoint got %d requests and the healthy one %d, want some and %d", len(failed()), len(answered()), n)
	}
	want := target{uri: "/rewritten-prefix/x?q=1", host: "app.internal"}
	for i, s := range append(failed(), answered()...) {
		if s != want {
			t.Errorf("attempt %d: got %+v, want %+v", i, s, want)
		}
	}
}
