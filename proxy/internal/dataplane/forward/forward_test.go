package forward_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"coxswain.dev/coxswain/proxy/internal/dataplane/forward"
	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
	"coxswain.dev/coxswain/proxy/internal/dataplane/upstream"
)

func listen(tb testing.TB) net.Listener {
	tb.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	return ln
}

// handlerFor returns a handler serving n routes to the endpoint at addr; h2c marks the cluster
// as speaking HTTP/2 without TLS.
func handlerFor(tb testing.TB, n int, addr string, h2c bool) (*forward.Handler, *upstream.Pool) {
	tb.Helper()
	res := snaptest.Resources(tb,
		snaptest.HTTP("bench/gw", 80, snaptest.VHost("http", "", snaptest.ScaleRoutes(n, "bench/app:80")...)),
		snaptest.Cluster(tb, "bench/app:80", addr))
	table, err := router.Compile(snaptest.Seq(res))
	if err != nil {
		tb.Fatal(err)
	}
	table.Clusters()[0].H2C = h2c
	pool := upstream.NewPool(upstream.Options{})
	h := forward.NewHandler(forward.Options{})
	h.Swap(&forward.State{Table: table, Upstreams: pool.Build(nil, table)})
	return h, pool
}

// request returns a request for route i of snaptest.ScaleRoutes.
func request(i int) *http.Request {
	host, path := snaptest.ScaleTarget(i)
	req := httptest.NewRequestWithContext(context.Background(), http.MethodGet, "http://"+host+path+"/items?id=7", nil)
	req.Header.Set("User-Agent", "bench")
	req.RemoteAddr = "10.0.0.1:5555"
	return req
}

var listener80 = &forward.Listener{Port: 80, Scheme: "http"}

// Tests that a cluster marked h2c is reached over HTTP/2 without TLS.
func TestH2CUpstream(t *testing.T) {
	t.Parallel()
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	ln := listen(t)
	srv := &http.Server{Protocols: &protocols, ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Proto", r.Proto)
		_, _ = fmt.Fprintf(w, "%s %s", r.Host, r.URL.RequestURI())
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	h, pool := handlerFor(t, 1, ln.Addr().String(), true)
	t.Cleanup(pool.Close)
	rec := httptest.NewRecorder()
	h.HTTP(listener80).ServeHTTP(rec, request(0))
	if got := rec.Header().Get("X-Proto"); rec.Code != 200 || got != "HTTP/2.0" {
		t.Fatalf("got %d over %q: %s", rec.Code, got, rec.Body)
	}
	if got := rec.Body.String(); got != "svc-0.example.com /api/v0/items?id=7" {
		t.Errorf("backend saw %q", got)
	}
}

// BenchmarkServe forwards one request through tables of 1, 1,000 and 10,000 routes to a
// keep-alive backend on loopback: the whole request path, allocations included.
func BenchmarkServe(b *testing.B) {
	ln := listen(b)
	body := make([]byte, 100)
	backend := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(body)
	})}
	go func() { _ = backend.Serve(ln) }()
	b.Cleanup(func() { _ = backend.Close() })
	for _, n := range []int{1, 1000, 10000} {
		b.Run(fmt.Sprintf("routes=%d", n), func(b *testing.B) {
			h, pool := handlerFor(b, n, ln.Addr().String(), false)
			defer pool.Close()
			serve := h.HTTP(listener80)
			req := request(n / 2)
			b.ReportAllocs()
			for b.Loop() {
				rec := httptest.NewRecorder()
				serve.ServeHTTP(rec, req)
				if rec.Code != 200 {
					b.Fatalf("got %d", rec.Code)
				}
			}
		})
	}
}
