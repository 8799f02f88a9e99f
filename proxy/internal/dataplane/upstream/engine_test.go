package upstream

import (
	"context"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/h1client"
	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// countingServer is a backend that answers with the protocol it saw and counts the
// connections it opened and closed.
func countingServer(t *testing.T, tls bool) (srv *httptest.Server, opened, closed *atomic.Int32) {
	t.Helper()
	opened, closed = &atomic.Int32{}, &atomic.Int32{}
	srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Proto)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			opened.Add(1)
		case http.StateClosed, http.StateHijacked:
			closed.Add(1)
		}
	}
	if tls {
		srv.EnableHTTP2 = true
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv, opened, closed
}

// Tests that with each engine a cluster's transport, plaintext and over backend TLS, speaks
// HTTP/1.1 to its endpoint, is the engine's own client, reuses its connection, and that
// closing the pool closes its idle connections.
func TestEnginesSpeakHTTP1ToEndpoints(t *testing.T) {
	t.Parallel()
	for _, engine := range http1.Engines {
		for _, tls := range []bool{false, true} {
			name := string(engine) + " plaintext"
			if tls {
				name = string(engine) + " TLS"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				testEngineExchange(t, engine, tls)
			})
		}
	}
}

func testEngineExchange(t *testing.T, engine http1.Engine, tls bool) {
	srv, opened, closed := countingServer(t, tls)
	addr := srv.Listener.Addr().String()
	cluster := clusterFor(t, addr, tls, srv)
	p := NewPool(Options{Engine: engine, ReuseQuarantine: -1})
	set := p.Build(nil, update(t, nil, cluster))
	p.Retire(nil, set)
	cl := set.Cluster(0)
	ep := cl.Next()
	rt := cl.Transport(ep)
	if _, native := rt.(*h1client.Transport); native != (engine == http1.EngineNative) {
		t.Fatalf("engine %s hands out %T", engine, rt)
	}
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, cl.Scheme()+"://"+addr+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		cancel()
		if string(b) != "HTTP/1.1" {
			t.Fatalf("the backend saw %q, want HTTP/1.1", b)
		}
	}
	if n := opened.Load(); n != 1 {
		t.Errorf("%d connections for three exchanges, want 1", n)
	}
	p.Close()
	deadline := time.Now().Add(5 * time.Second)
	for closed.Load() != opened.Load() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if closed.Load() != opened.Load() {
		t.Errorf("%d of %d connections closed after the pool closed", closed.Load(), opened.Load())
	}
}

// clusterFor returns a cluster of addr, with backend TLS trusting srv's certificate when tls.
func clusterFor(t *testing.T, addr string, tls bool, srv *httptest.Server) *discoveryv1.Cluster {
	t.Helper()
	c := snaptest.Cluster(t, "ns/backend:80", addr)
	if tls {
		ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
		c.Tls = &discoveryv1.BackendTLS{ServerName: "example.com", CaCertificatesPem: ca}
	}
	return c
}
