package dataplane_test

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// h2cBackend starts a server on 127.0.0.1 that speaks HTTP/1.1 and HTTP/2 without TLS (prior
// knowledge), and records the major protocol version of each request by path.
func h2cBackend(t *testing.T) (addr string, seen func(path string) int) {
	t.Helper()
	var mu sync.Mutex
	majors := map[string]int{}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &protocols, ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		majors[r.URL.Path] = r.ProtoMajor
		mu.Unlock()
		w.Header().Set("X-Proto-Major", strconv.Itoa(r.ProtoMajor))
	})}
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String(), func(path string) int {
		mu.Lock()
		defer mu.Unlock()
		return majors[path]
	}
}

// Tests that a cluster whose upstream protocol is H2C reaches its backend over HTTP/2 without
// TLS, and that HTTP1 and unspecified clusters reach the same backend over HTTP/1.1.
func TestUpstreamProtocol(t *testing.T) {
	t.Parallel()
	backendAddr, seen := h2cBackend(t)
	d := start(t, dataplane.Options{})
	cluster := func(name string, p discoveryv1.UpstreamProtocol) *discoveryv1.Cluster {
		cl := snaptest.Cluster(t, name, backendAddr)
		cl.UpstreamProtocol = p
		return cl
	}
	apply(t, d,
		snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "",
			snaptest.Route("ns/h2c/0/0", "", snaptest.Prefix("/h2c"), "ns/grpc:9000"),
			snaptest.Route("ns/http1/0/0", "", snaptest.Prefix("/http1"), "ns/plain:8080"),
			snaptest.Route("ns/unspecified/0/0", "", snaptest.Prefix("/unspecified"), "ns/legacy:8080"),
		)),
		cluster("ns/grpc:9000", discoveryv1.UpstreamProtocol_UPSTREAM_PROTOCOL_H2C),
		cluster("ns/plain:8080", discoveryv1.UpstreamProtocol_UPSTREAM_PROTOCOL_HTTP1),
		cluster("ns/legacy:8080", discoveryv1.UpstreamProtocol_UPSTREAM_PROTOCOL_UNSPECIFIED),
	)
	c := client(addr(t, d, 80))
	for path, want := range map[string]int{"/h2c": 2, "/http1": 1, "/unspecified": 1} {
		resp := do(t, c, http.MethodGet, "http://app.example.com"+path)
		if resp.status != http.StatusOK {
			t.Fatalf("%s: got %d: %s", path, resp.status, resp.body)
		}
		if got := seen(path); got != want {
			t.Errorf("%s: backend saw HTTP/%d, want HTTP/%d", path, got, want)
		}
		if got := resp.header.Get("X-Proto-Major"); got != strconv.Itoa(want) {
			t.Errorf("%s: backend answered over HTTP/%s, want HTTP/%d", path, got, want)
		}
	}
}
