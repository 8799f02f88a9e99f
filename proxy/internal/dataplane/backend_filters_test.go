package dataplane_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

func setHeader(name, value string) *discoveryv1.Header {
	return &discoveryv1.Header{Name: name, Value: value}
}

// Tests that each backend's header modifiers apply to exactly the requests it gets, after the
// route's, with the requests shared by weight; and that a mirror copy carries the route's
// modifications but no backend's.
func TestBackendHeaderFiltersWithWeights(t *testing.T) {
	t.Parallel()
	a, na := backend(t, "a")
	b, nb := backend(t, "b")
	var mu sync.Mutex
	var mirrored []http.Header
	mirror := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		mu.Lock()
		mirrored = append(mirrored, r.Header.Clone())
		mu.Unlock()
	}))
	t.Cleanup(mirror.Close)
	d := start(t, dataplane.Options{})
	route := &discoveryv1.Route{
		Name: "ns/split/0/0", Match: snaptest.Prefix("/"),
		Filters: []*discoveryv1.Filter{
			filter(&discoveryv1.Filter_RequestHeaders{RequestHeaders: &discoveryv1.HeaderModifier{
				Set: []*discoveryv1.Header{setHeader("X-Route", "split")}, Add: []*discoveryv1.Header{setHeader("X-Order", "route")},
			}}),
			filter(&discoveryv1.Filter_ResponseHeaders{ResponseHeaders: &discoveryv1.HeaderModifier{
				Set: []*discoveryv1.Header{setHeader("X-Layer", "route")},
			}}),
			filter(&discoveryv1.Filter_Mirror{Mirror: &discoveryv1.Mirror{Cluster: "ns/mirror:80", Numerator: 1, Denominator: 1}}),
		},
		Backends: []*discoveryv1.WeightedBackend{
			{Cluster: "ns/a:80", Weight: 50, Filters: []*discoveryv1.Filter{
				filter(&discoveryv1.Filter_RequestHeaders{RequestHeaders: &discoveryv1.HeaderModifier{
					Set: []*discoveryv1.Header{setHeader("Backend", "a")}, Add: []*discoveryv1.Header{setHeader("X-Order", "a")},
				}}),
				filter(&discoveryv1.Filter_ResponseHeaders{ResponseHeaders: &discoveryv1.HeaderModifier{
					Set: []*discoveryv1.Header{setHeader("X-Layer", "a")}, Add: []*discoveryv1.Header{setHeader("X-Served-By", "a")},
				}}),
			}},
			{Cluster: "ns/b:80", Weight: 50, Filters: []*discoveryv1.Filter{
				filter(&discoveryv1.Filter_RequestHeaders{RequestHeaders: &discoveryv1.HeaderModifier{
					Set: []*discoveryv1.Header{setHeader("Backend", "b"), setHeader("X-Forwarded-For", "spoofed")}, Remove: []string{"X-Route"},
				}}),
			}},
		},
	}
	apply(t, d, snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "", route)),
		snaptest.Cluster(t, "ns/a:80", hostPort(a)), snaptest.Cluster(t, "ns/b:80", hostPort(b)),
		snaptest.Cluster(t, "ns/mirror:80", hostPort(mirror)))
	c := client(addr(t, d, 80))
	const n = 200
	for i := range n {
		r := do(t, c, "GET", "http://www.example.com/", "Backend: client")
		hdr := http.Header(r.echo.Headers)
		if r.status != 200 || hdr.Values("Backend")[0] != r.echo.Backend || len(hdr.Values("Backend")) != 1 {
			t.Fatalf("request %d: %d, backend %q got Backend %q", i, r.status, r.echo.Backend, hdr.Values("Backend"))
		}
		if got := hdr.Get("X-Forwarded-For"); got != "127.0.0.1" {
			t.Fatalf("request %d: a backend filter changed X-Forwarded-For to %q", i, got)
		}
		switch r.echo.Backend {
		case "a":
			if got := strings.Join(hdr.Values("X-Order"), ","); hdr.Get("X-Route") != "split" || got != "route,a" {
				t.Fatalf("request %d to a: X-Route %q, X-Order %q, want the route's filter, then a's", i, hdr.Get("X-Route"), got)
			}
			if r.header.Get("X-Layer") != "a" || r.header.Get("X-Served-By") != "a" {
				t.Fatalf("response %d from a: %v", i, r.header)
			}
		case "b":
			if hdr.Get("X-Route") != "" || hdr.Get("X-Order") != "route" {
				t.Fatalf("request %d to b: %v, want the route's filter, then b's", i, hdr)
			}
			if r.header.Get("X-Layer") != "route" || r.header.Get("X-Served-By") != "" {
				t.Fatalf("response %d from b: %v", i, r.header)
			}
		}
	}
	if a, b := na.Load(), nb.Load(); a+b != n || a < 70 || b < 70 {
		t.Errorf("a took %d and b %d of %d, want about half each", a, b, n)
	}
	eventually(t, "the mirror got every copy", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(mirrored) == n
	})
	mu.Lock()
	defer mu.Unlock()
	for i, h := range mirrored {
		if h.Get("Backend") != "client" || h.Get("X-Route") != "split" || h.Get("X-Order") != "route" {
			t.Fatalf("mirror copy %d carries a backend's modifications: %v", i, h)
		}
	}
}

// Tests that a client may not announce as a trailer a field that only a backend's filter
// modifies: it would reach that backend past the filter.
func TestBackendHeaderFilterManagesTrailers(t *testing.T) {
	t.Parallel()
	be := newRawBackend(t, answerEach)
	d := start(t, dataplane.Options{})
	proxy := routeAll(t, d, be.addr(), func(r *discoveryv1.Route) {
		r.Backends[0].Filters = []*discoveryv1.Filter{filter(&discoveryv1.Filter_RequestHeaders{RequestHeaders: &discoveryv1.HeaderModifier{
			Set: []*discoveryv1.Header{setHeader("X-Tenant", "blue")},
		}})}
	})
	c, br := rawConn(t, proxy)
	resp, _ := roundTrip(t, c, br, "POST / HTTP/1.1\r\nHost: x\r\nTrailer: X-Tenant\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\nX-Tenant: red\r\n\r\n")
	if resp.StatusCode != 400 {
		t.Errorf("got %d, want 400", resp.StatusCode)
	}
	if got := be.requests(); len(got) != 0 {
		t.Errorf("backend received %d requests", len(got))
	}
}
