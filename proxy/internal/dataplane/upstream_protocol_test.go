package dataplane_test

import (
	"context"
	"io"
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

// Tests that nothing is added on the h2c path either: the backend gets no User-Agent and no
// Accept-Encoding the client did not send, the client no Content-Type the backend did not
// send, and a body over 64 MiB (the old buffering limit) arrives whole.
func TestH2CUpstreamAddsNothing(t *testing.T) {
	t.Parallel()
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &protocols, ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = nil
		w.Header().Set("X-Saw", r.Header.Get("User-Agent")+"|"+r.Header.Get("Accept-Encoding"))
		if r.URL.Path == "/big" {
			_, _ = io.Copy(w, io.LimitReader(&pattern{}, 65<<20))
			return
		}
		_, _ = io.WriteString(w, "hello")
	})}
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	d := start(t, dataplane.Options{})
	cl := snaptest.Cluster(t, "ns/grpc:9000", ln.Addr().String())
	cl.UpstreamProtocol = discoveryv1.UpstreamProtocol_UPSTREAM_PROTOCOL_H2C
	apply(t, d, snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "", snaptest.Route("ns/r/0/0", "", snaptest.Prefix("/"), "ns/grpc:9000"))), cl)
	c, br := rawConn(t, addr(t, d, 80))
	resp, body := roundTrip(t, c, br, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 200 || body != "hello" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	if got := resp.Header.Get("X-Saw"); got != "|" {
		t.Errorf("backend got User-Agent|Accept-Encoding %q", got)
	}
	if got, ok := resp.Header["Content-Type"]; ok {
		t.Errorf("client got Content-Type %q", got)
	}
	long := client(addr(t, d, 80))
	long.Timeout = 2 * time.Minute
	big, err := long.Get("http://x/big")
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, big.Body)
	_ = big.Body.Close()
	if err != nil || n != 65<<20 {
		t.Errorf("65 MiB over h2c: %d bytes, %v", n, err)
	}
}
