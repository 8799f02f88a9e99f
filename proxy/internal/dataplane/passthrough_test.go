package dataplane_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/forward"
	"coxswain.dev/coxswain/proxy/internal/dataplane/listener"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// sniBackend is a backend that terminates TLS itself and answers every request with its name.
func sniBackend(t *testing.T, name string) *httptest.Server {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, "%s sni=%s", name, r.TLS.ServerName)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// passthroughPort applies a TLS passthrough listener on port 443: a.example to backend a,
// *.b.example to backend b, and, with catchAll, every other name (or none) to backend c.
func passthroughPort(t *testing.T, d *dataplane.DataPlane, a, b, c string, catchAll bool) string {
	t.Helper()
	routes := []*discoveryv1.Route{
		snaptest.Route("ns/a/0/0", "a.example", snaptest.Prefix("/"), "ns/a:443"),
		snaptest.Route("ns/b/0/0", "*.b.example", snaptest.Prefix("/"), "ns/b:443"),
	}
	if catchAll {
		routes = append(routes, snaptest.Route("ns/c/0/0", "", snaptest.Prefix("/"), "ns/c:443"))
	}
	apply(t, d,
		snaptest.Listener("ns/gw", 443, discoveryv1.Protocol_PROTOCOL_TLS_PASSTHROUGH, snaptest.VHost("tls", "", routes...)),
		snaptest.Cluster(t, "ns/a:443", a), snaptest.Cluster(t, "ns/b:443", b), snaptest.Cluster(t, "ns/c:443", c))
	return addr(t, d, 443)
}

// getOverTLS makes one request over a TLS connection to addr naming serverName, whose
// handshake is the backend's, and returns the body.
func getOverTLS(t *testing.T, conn net.Conn, serverName string) (string, error) {
	t.Helper()
	tc := tls.Client(conn, &tls.Config{ServerName: serverName, InsecureSkipVerify: true}) //nolint:gosec // the backends' test certificates
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.HandshakeContext(context.Background()); err != nil {
		return "", err
	}
	if _, err := io.WriteString(tc, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

// Tests that a passthrough port routes each connection by its ClientHello's server name, exact
// before wildcard before catch-all, and that the backend terminates the TLS the client started:
// the backend sees the server name the client sent.
func TestPassthroughRoutesByServerName(t *testing.T) {
	t.Parallel()
	a, b, c := sniBackend(t, "a"), sniBackend(t, "b"), sniBackend(t, "c")
	reg := prometheus.NewRegistry()
	d := start(t, dataplane.Options{Registerer: reg})
	proxy := passthroughPort(t, d, a.Listener.Addr().String(), b.Listener.Addr().String(), c.Listener.Addr().String(), true)
	for _, tc := range []struct{ serverName, want string }{
		{"a.example", "a sni=a.example"},
		{"A.Example", "a sni=A.Example"},
		{"x.b.example", "b sni=x.b.example"},
		{"deep.x.b.example", "b sni=deep.x.b.example"},
		{"b.example", "c sni=b.example"},
		{"", "c sni="},
	} {
		c, _ := rawConn(t, proxy)
		got, err := getOverTLS(t, c, tc.serverName)
		if err != nil || got != tc.want {
			t.Errorf("server name %q: %q, %v; want %q", tc.serverName, got, err, tc.want)
		}
	}
	if got := metricSum(t, reg, "coxswain_proxy_passthrough_connections_total", "outcome", "forwarded"); got != 6 {
		t.Errorf("forwarded connections counted %v, want 6", got)
	}
	// Bytes count as they pass, before the connections end: a ClientHello is over 100 bytes
	// and a response over 50.
	eventually(t, "bytes counted both ways", func() bool {
		return metricSum(t, reg, "coxswain_proxy_passthrough_bytes_total", "direction", "downstream") > 6*50 &&
			metricSum(t, reg, "coxswain_proxy_passthrough_bytes_total", "direction", "upstream") > 6*100
	})
}

// oneByteConn writes every byte on its own, so that the proxy reads the ClientHello in pieces.
type oneByteConn struct{ net.Conn }

func (c oneByteConn) Write(p []byte) (int, error) {
	for i := range p {
		if _, err := c.Conn.Write(p[i : i+1]); err != nil {
			return i, err
		}
	}
	return len(p), nil
}

// Tests that a ClientHello arriving a byte at a time, across many reads, is routed as a whole
// one is, and that its bytes reach the backend intact (its handshake completes).
func TestPassthroughHelloSplitAcrossReads(t *testing.T) {
	t.Parallel()
	a := sniBackend(t, "a")
	d := start(t, dataplane.Options{})
	proxy := passthroughPort(t, d, a.Listener.Addr().String(), a.Listener.Addr().String(), a.Listener.Addr().String(), false)
	c, _ := rawConn(t, proxy)
	if got, err := getOverTLS(t, oneByteConn{c}, "a.example"); err != nil || got != "a sni=a.example" {
		t.Fatalf("split hello: %q, %v", got, err)
	}
}

// expectClosed reads from c until it ends, and fails unless it ends with no byte within wait.
func expectClosed(t *testing.T, c net.Conn, wait time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(wait))
	n, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the proxy kept the connection open for %s", wait)
	}
	if n != 0 {
		t.Fatalf("the proxy wrote %d bytes before closing; want none (the handshake is the backend's)", n)
	}
}

// Tests what a passthrough port does with connections it cannot route: each is closed without
// a byte written (no TLS alert: the proxy is not the TLS server) and counted with its reason.
func TestPassthroughRefusals(t *testing.T) {
	t.Parallel()
	a := sniBackend(t, "a")
	reg := prometheus.NewRegistry()
	d := start(t, dataplane.Options{Registerer: reg, Listener: listener.Options{HeaderReadTimeout: 300 * time.Millisecond}})
	// The catch-all route goes to a closed port: no backend endpoint is reachable.
	closed, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := closed.Addr().String()
	_ = closed.Close()
	proxy := passthroughPort(t, d, a.Listener.Addr().String(), a.Listener.Addr().String(), deadAddr, false)

	t.Run("a name no route serves", func(t *testing.T) {
		c, _ := rawConn(t, proxy)
		if _, err := getOverTLS(t, c, "nobody.example"); err == nil {
			t.Fatal("handshake completed for a name no route serves")
		}
		eventually(t, "no_route counted", func() bool {
			return metricValue(t, reg, "coxswain_proxy_passthrough_connections_total", "no_route") == 1
		})
	})
	t.Run("a hello without a server name and no catch-all route", func(t *testing.T) {
		c, _ := rawConn(t, proxy)
		if _, err := getOverTLS(t, c, ""); err == nil {
			t.Fatal("handshake completed without a server name")
		}
		eventually(t, "no_route counted", func() bool {
			return metricValue(t, reg, "coxswain_proxy_passthrough_connections_total", "no_route") == 2
		})
	})
	t.Run("not TLS", func(t *testing.T) {
		c, _ := rawConn(t, proxy)
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: a.example\r\n\r\n")
		expectClosed(t, c, 5*time.Second)
		eventually(t, "bad_hello counted", func() bool {
			return metricValue(t, reg, "coxswain_proxy_passthrough_connections_total", "bad_hello") == 1
		})
	})
	t.Run("no hello", func(t *testing.T) {
		c, _ := rawConn(t, proxy)
		begin := time.Now()
		expectClosed(t, c, 5*time.Second)
		if took := time.Since(begin); took < 250*time.Millisecond {
			t.Errorf("closed after %s, before the hello timeout", took)
		}
		eventually(t, "hello_timeout counted", func() bool {
			return metricValue(t, reg, "coxswain_proxy_passthrough_connections_total", "hello_timeout") == 1
		})
	})
	t.Run("a hello sent slower than the timeout", func(t *testing.T) {
		c, _ := rawConn(t, proxy)
		// A handshake record announcing 512 bytes, trickled a byte every 50 ms: the timeout
		// bounds the whole hello, not each read.
		record := append([]byte{22, 3, 1, 2, 0}, make([]byte, 512)...)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for _, b := range record {
				if _, err := c.Write([]byte{b}); err != nil {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
		expectClosed(t, c, 5*time.Second)
		_ = c.Close()
		<-done
		eventually(t, "hello_timeout counted", func() bool {
			return metricValue(t, reg, "coxswain_proxy_passthrough_connections_total", "hello_timeout") == 2
		})
	})
	t.Run("a hello larger than the bound", func(t *testing.T) {
		c, _ := rawConn(t, proxy)
		// A handshake message announcing 64 KiB, in full-size records.
		msg := append([]byte{1, 0x01, 0x00, 0x00}, make([]byte, 64<<10)...)
		var stream []byte
		for len(msg) > 0 {
			n := min(len(msg), 16<<10)
			stream = append(stream, 22, 3, 3, byte(n>>8), byte(n))
			stream = append(stream, msg[:n]...)
			msg = msg[n:]
		}
		go func() { _, _ = c.Write(stream) }()
		expectClosed(t, c, 5*time.Second)
		eventually(t, "hello_too_large counted", func() bool {
			return metricValue(t, reg, "coxswain_proxy_passthrough_connections_total", "hello_too_large") == 1
		})
	})
	t.Run("no endpoint reachable", func(t *testing.T) {
		// Names under c go nowhere in this table: send one to a's backend-less catch-all by
		// applying a table whose only route names the dead endpoint.
		apply(t, d,
			snaptest.Listener("ns/gw", 443, discoveryv1.Protocol_PROTOCOL_TLS_PASSTHROUGH,
				snaptest.VHost("tls", "", snaptest.Route("ns/dead/0/0", "", snaptest.Prefix("/"), "ns/dead:443"))),
			snaptest.Cluster(t, "ns/dead:443", deadAddr))
		c, _ := rawConn(t, proxy)
		if _, err := getOverTLS(t, c, "a.example"); err == nil {
			t.Fatal("handshake completed with no reachable endpoint")
		}
		eventually(t, "backend_unavailable counted", func() bool {
			return metricValue(t, reg, "coxswain_proxy_passthrough_connections_total", "backend_unavailable") == 1
		})
	})
	if t.Failed() {
		return
	}
	if got := metricSum(t, reg, "coxswain_proxy_passthrough_connections_total", "outcome", "forwarded"); got != 0 {
		t.Errorf("%v connections forwarded, want none", got)
	}
}

// Tests that a passthrough connection is a tunnel: a table without its route closes it, as it
// closes a WebSocket tunnel whose route left.
func TestPassthroughClosedWhenItsRouteLeaves(t *testing.T) {
	t.Parallel()
	// A raw backend that reads what it gets and never answers: the client's connection stays
	// open until the proxy closes it.
	be, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = be.Close() })
	go func() {
		for {
			c, err := be.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); _ = c.Close() }()
		}
	}()
	d := start(t, dataplane.Options{})
	proxy := passthroughPort(t, d, be.Addr().String(), be.Addr().String(), be.Addr().String(), false)
	c, _ := rawConn(t, proxy)
	go func() {
		tc := tls.Client(c, &tls.Config{ServerName: "a.example", InsecureSkipVerify: true}) //nolint:gosec // no certificate is ever checked: the backend never answers
		_ = tc.HandshakeContext(context.Background())
	}()
	time.Sleep(200 * time.Millisecond)
	apply(t, d,
		snaptest.Listener("ns/gw", 443, discoveryv1.Protocol_PROTOCOL_TLS_PASSTHROUGH,
			snaptest.VHost("tls", "", snaptest.Route("ns/b/0/0", "*.b.example", snaptest.Prefix("/"), "ns/b:443"))),
		snaptest.Cluster(t, "ns/b:443", be.Addr().String()))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = io.Copy(io.Discard, c)
	if err != nil && strings.Contains(err.Error(), "timeout") {
		t.Fatal("the connection of a route that left stayed open")
	}
}

// metricSum returns the sum of the counters of a family whose label is value.
func metricSum(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// halfCloseBackend reads a connection to its end, then answers "got <what it read>" and closes.
func halfCloseBackend(t *testing.T) string {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				got, _ := io.ReadAll(c)
				_, _ = io.WriteString(c, "got "+string(got))
			}()
		}
	}()
	return ln.Addr().String()
}

// tcpPort applies a TCP listener on port 9000 whose routes, first to last, go to backends.
func tcpPort(t *testing.T, d *dataplane.DataPlane, backends ...string) string {
	t.Helper()
	var routes []*discoveryv1.Route
	msgs := []proto.Message{}
	for i, be := range backends {
		cluster := fmt.Sprintf("ns/be%d:9000", i)
		routes = append(routes, snaptest.Route(fmt.Sprintf("ns/r%d/0/0", i), "", snaptest.Prefix("/"), cluster))
		msgs = append(msgs, snaptest.Cluster(t, cluster, be))
	}
	msgs = append(msgs, snaptest.Listener("ns/gw", 9000, discoveryv1.Protocol_PROTOCOL_TCP, snaptest.VHost("tcp", "", routes...)))
	apply(t, d, msgs...)
	return addr(t, d, 9000)
}

// Tests that a TCP port forwards bytes both ways as they come, a half-close included: the client
// sends and closes its side, the backend reads to the end and answers on the half-open
// connection; and that the first route takes every connection (the controller orders the
// oldest first), the second none.
func TestTCPForwardsWithHalfClose(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	d := start(t, dataplane.Options{Registerer: reg})
	proxy := tcpPort(t, d, halfCloseBackend(t), "127.0.0.1:1")
	for i := range 5 {
		c, br := rawConn(t, proxy)
		msg := fmt.Sprintf("hello %d", i)
		if _, err := io.WriteString(c, msg); err != nil {
			t.Fatal(err)
		}
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(br)
		if err != nil || string(got) != "got "+msg {
			t.Fatalf("connection %d: %q, %v; want %q", i, got, err, "got "+msg)
		}
	}
	// A connection is counted once its tunnel started, on the proxy's goroutine: the client may
	// have its answer first.
	eventually(t, "the first route to count its 5 connections", func() bool {
		return metricSum(t, reg, "coxswain_proxy_passthrough_connections_total", "route", "ns/r0/0/0") == 5
	})
	if got := metricSum(t, reg, "coxswain_proxy_passthrough_connections_total", "route", "ns/r1/0/0"); got != 0 {
		t.Errorf("the second route took %v connections, want none", got)
	}
}

// Tests that a TCP connection carrying nothing either way for the tunnel idle timeout is closed.
func TestTCPIdleConnectionClosed(t *testing.T) {
	t.Parallel()
	d := start(t, dataplane.Options{Forward: forward.Options{TunnelIdleTimeout: 300 * time.Millisecond}})
	proxy := tcpPort(t, d, halfCloseBackend(t))
	c, _ := rawConn(t, proxy)
	begin := time.Now()
	expectClosed(t, c, 5*time.Second)
	if took := time.Since(begin); took < 250*time.Millisecond {
		t.Errorf("closed after %s, before the idle timeout", took)
	}
}

// Tests that a client holding its share of the connection limit gets no more TCP connections
// forwarded: the one beyond is closed on accept and counted, the others keep working.
func TestTCPConnectionLimitPerClient(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	d := start(t, dataplane.Options{Registerer: reg, Listener: listener.Options{MaxConnectionsPerClient: 3}})
	proxy := tcpPort(t, d, halfCloseBackend(t))
	var held []net.Conn
	for range 3 {
		c, _ := rawConn(t, proxy)
		held = append(held, c)
	}
	eventually(t, "three connections forwarded", func() bool {
		return metricSum(t, reg, "coxswain_proxy_passthrough_connections_total", "outcome", "forwarded") == 3
	})
	c, _ := rawConn(t, proxy)
	expectClosed(t, c, 5*time.Second)
	if got := metricValue(t, reg, "coxswain_proxy_refused_client_connections_total", ""); got != 1 {
		t.Errorf("refused client connections %v, want 1", got)
	}
	_, _ = io.WriteString(held[0], "still")
	_ = held[0].(*net.TCPConn).CloseWrite()
	if got, err := io.ReadAll(held[0]); err != nil || string(got) != "got still" {
		t.Fatalf("a held connection: %q, %v", got, err)
	}
}
