package dataplane_test

import (
	"net/http"
	"strings"
	"testing"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

func filter(kind any) *discoveryv1.Filter {
	switch k := kind.(type) {
	case *discoveryv1.Filter_RequestHeaders:
		return &discoveryv1.Filter{Kind: k}
	case *discoveryv1.Filter_ResponseHeaders:
		return &discoveryv1.Filter{Kind: k}
	case *discoveryv1.Filter_Redirect:
		return &discoveryv1.Filter{Kind: k}
	case *discoveryv1.Filter_Rewrite:
		return &discoveryv1.Filter{Kind: k}
	case *discoveryv1.Filter_Mirror:
		return &discoveryv1.Filter{Kind: k}
	}
	panic("unknown filter")
}

func prefixReplace(v string) *discoveryv1.PathModifier {
	return &discoveryv1.PathModifier{Kind: &discoveryv1.PathModifier_ReplacePrefixMatch{ReplacePrefixMatch: v}}
}

// Tests what reaches the backend and the client over HTTP/1.1 for each kind of route.
func TestHTTP1Routes(t *testing.T) {
	t.Parallel()
	app, _ := backend(t, "app")
	d := start(t, dataplane.Options{})
	headers := snaptest.Route("ns/headers/0/0", "", snaptest.Prefix("/headers"), "ns/app:80")
	headers.Filters = []*discoveryv1.Filter{
		filter(&discoveryv1.Filter_RequestHeaders{RequestHeaders: &discoveryv1.HeaderModifier{
			Set: []*discoveryv1.Header{{Name: "X-Env", Value: "prod"}}, Add: []*discoveryv1.Header{{Name: "X-Trace", Value: "on"}}, Remove: []string{"X-Internal"},
		}}),
		filter(&discoveryv1.Filter_ResponseHeaders{ResponseHeaders: &discoveryv1.HeaderModifier{
			Set: []*discoveryv1.Header{{Name: "Cache-Control", Value: "no-store"}}, Remove: []string{"X-Backend"},
		}}),
	}
	rewrite := snaptest.Route("ns/rewrite/0/0", "", snaptest.Prefix("/old"), "ns/app:80")
	rewrite.Filters = []*discoveryv1.Filter{filter(&discoveryv1.Filter_Rewrite{Rewrite: &discoveryv1.Rewrite{
		Hostname: "internal.example.com", Path: prefixReplace("/new"),
	}})}
	redirect := &discoveryv1.Route{Name: "ns/redirect/0/0", Match: snaptest.Prefix("/to-https"), Filters: []*discoveryv1.Filter{
		filter(&discoveryv1.Filter_Redirect{Redirect: &discoveryv1.Redirect{Scheme: "https", Port: 443, StatusCode: 301, Path: prefixReplace("/secure")}}),
	}}
	direct := &discoveryv1.Route{Name: "ns/direct/0/0", Match: snaptest.Prefix("/direct"), DirectStatus: 500}
	missing := snaptest.Route("ns/missing/0/0", "", snaptest.Prefix("/missing"), "ns/gone:80")
	empty := snaptest.Route("ns/empty/0/0", "", snaptest.Prefix("/empty"), "ns/empty:80")
	apply(t, d,
		snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "", headers, rewrite, redirect, direct, missing, empty,
			snaptest.Route("ns/root/0/0", "", snaptest.Exact("/"), "ns/app:80"))),
		snaptest.Cluster(t, "ns/app:80", hostPort(app)),
		&discoveryv1.Cluster{Name: "ns/empty:80"},
	)
	c := client(addr(t, d, 80))
	base := "http://www.example.com"

	t.Run("a request is forwarded with its host, path, query and forwarding headers", func(t *testing.T) {
		r := do(t, c, "GET", base+"/?q=1", "X-Forwarded-For: 10.1.1.1", "Connection: keep-alive, X-Hop", "Keep-Alive: timeout=5")
		if r.status != 200 || r.echo.Host != "www.example.com" || r.echo.URI != "/?q=1" {
			t.Fatalf("got %d %+v", r.status, r.echo)
		}
		hdr := http.Header(r.echo.Headers)
		if got := hdr.Get("X-Forwarded-For"); got != "10.1.1.1, 127.0.0.1" {
			t.Errorf("X-Forwarded-For %q", got)
		}
		if hdr.Get("X-Forwarded-Proto") != "http" || hdr.Get("Keep-Alive") != "" || r.echo.Proto != "HTTP/1.1" {
			t.Errorf("forwarding headers %v", hdr)
		}
	})
	t.Run("request and response header filters apply", func(t *testing.T) {
		r := do(t, c, "GET", base+"/headers", "X-Env: dev", "X-Trace: client", "X-Internal: secret")
		hdr := http.Header(r.echo.Headers)
		if hdr.Get("X-Env") != "prod" || strings.Join(hdr.Values("X-Trace"), ",") != "client,on" || hdr.Get("X-Internal") != "" {
			t.Errorf("request headers %v", hdr)
		}
		if r.header.Get("Cache-Control") != "no-store" || r.header.Get("X-Backend") != "" {
			t.Errorf("response headers %v", r.header)
		}
	})
	t.Run("a rewrite replaces the matched prefix and the host", func(t *testing.T) {
		r := do(t, c, "GET", base+"/old/x?y=1")
		if r.echo.URI != "/new/x?y=1" || r.echo.Host != "internal.example.com" {
			t.Errorf("got %+v", r.echo)
		}
	})
	t.Run("a redirect builds its location from the request", func(t *testing.T) {
		r := do(t, c, "GET", base+"/to-https/a?b=c")
		if r.status != 301 || r.header.Get("Location") != "https://www.example.com/secure/a?b=c" {
			t.Errorf("got %d %q", r.status, r.header.Get("Location"))
		}
	})
	for _, tc := range []struct {
		name, path string
		want       int
	}{
		{"a rule with nothing to forward to answers 500", "/direct", 500},
		{"a backend naming a missing cluster answers 500", "/missing", 500},
		{"a cluster without endpoints answers 503", "/empty", 503},
		{"a path no route matches answers 404", "/nothing", 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := do(t, c, "GET", base+tc.path); r.status != tc.want {
				t.Errorf("%s: got %d, want %d", tc.path, r.status, tc.want)
			}
		})
	}
	t.Run("a request body reaches the backend", func(t *testing.T) {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", base+"/", strings.NewReader("hello"))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("got %d", resp.StatusCode)
		}
	})
}

// Tests that weighted backends share requests by weight and round-robin over endpoints.
func TestWeightedBackendsAndEndpoints(t *testing.T) {
	t.Parallel()
	a1, n1 := backend(t, "a1")
	a2, n2 := backend(t, "a2")
	b, nb := backend(t, "b")
	d := start(t, dataplane.Options{})
	r := &discoveryv1.Route{Name: "ns/split/0/0", Match: snaptest.Prefix("/"), Backends: []*discoveryv1.WeightedBackend{
		{Cluster: "ns/a:80", Weight: 3}, {Cluster: "ns/b:80", Weight: 1},
	}}
	apply(t, d, snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "", r)),
		snaptest.Cluster(t, "ns/a:80", hostPort(a1), hostPort(a2)), snaptest.Cluster(t, "ns/b:80", hostPort(b)))
	c := client(addr(t, d, 80))
	const n = 400
	for range n {
		if r := do(t, c, "GET", "http://x/"); r.status != 200 {
			t.Fatalf("got %d", r.status)
		}
	}
	a, bb := n1.Load()+n2.Load(), nb.Load()
	if a < 270 || a > 330 || a+bb != n {
		t.Errorf("a took %d and b %d of %d, want about 300 and 100", a, bb, n)
	}
	if diff := n1.Load() - n2.Load(); diff < -2 || diff > 2 {
		t.Errorf("endpoints of a took %d and %d, want round-robin", n1.Load(), n2.Load())
	}
}
