package dataplane_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/listener"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// terminatePort applies a TLS listener on port 8443 in mixed mode: tls.example.com terminates
// with a certificate for it and goes to plain, passthrough.example.com goes to passthrough as
// the client sent it. It returns the proxy's address and the terminating certificate's leaf.
func terminatePort(t *testing.T, d *dataplane.DataPlane, plain string, passthrough string, plainTLS *discoveryv1.BackendTLS) (string, *x509.Certificate) {
	t.Helper()
	cert, leaf := snaptest.Certificate(t, "ns/term", "tls.example.com")
	term := snaptest.VHost("term", "tls.example.com", snaptest.Route("ns/term/0/0", "tls.example.com", snaptest.Prefix("/"), "ns/plain:3000"))
	term.Certificates = []string{"ns/term"}
	pass := snaptest.VHost("pass", "passthrough.example.com",
		snaptest.Route("ns/pass/0/0", "passthrough.example.com", snaptest.Prefix("/"), "ns/pass:443"))
	plainCluster := snaptest.Cluster(t, "ns/plain:3000", plain)
	if plainTLS != nil {
		plainCluster = tlsCluster(t, "ns/plain:3000", plain, plainTLS)
	}
	apply(t, d,
		snaptest.Listener("ns/gw", 8443, discoveryv1.Protocol_PROTOCOL_TLS, term, pass),
		cert, plainCluster, snaptest.Cluster(t, "ns/pass:443", passthrough))
	return addr(t, d, 8443), leaf
}

// dialTerminated completes a TLS handshake with the proxy naming serverName, trusting only
// leaf, and returns the connection.
func dialTerminated(t *testing.T, proxy, serverName string, leaf *x509.Certificate) (*tls.Conn, error) {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	c, _ := rawConn(t, proxy)
	tc := tls.Client(c, &tls.Config{ServerName: serverName, RootCAs: roots, MinVersion: tls.VersionTLS12})
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	return tc, tc.HandshakeContext(context.Background())
}

// Tests mixed termination on one port: a server name whose virtual host has certificates is
// terminated with them (the client verifies the certificate) and its backend gets the
// decrypted bytes, half-close included; a server name whose virtual host has none reaches its
// backend as the client sent it (the backend terminates and sees the server name). Both count
// as forwarded, with the bytes they carried.
func TestTLSTerminateAndPassthroughOnOnePort(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	d := start(t, dataplane.Options{Registerer: reg})
	sni := sniBackend(t, "pass")
	proxy, leaf := terminatePort(t, d, halfCloseBackend(t), sni.Listener.Addr().String(), nil)

	t.Run("terminated", func(t *testing.T) {
		tc, err := dialTerminated(t, proxy, "tls.example.com", leaf)
		if err != nil {
			t.Fatalf("handshake with the proxy: %v", err)
		}
		if st := tc.ConnectionState(); !st.PeerCertificates[0].Equal(leaf) || st.NegotiatedProtocol != "" {
			t.Fatalf("served %s with ALPN %q; want the listener's certificate and no ALPN", st.PeerCertificates[0].Subject, st.NegotiatedProtocol)
		}
		if _, err := io.WriteString(tc, "plain words"); err != nil {
			t.Fatal(err)
		}
		if err := tc.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(tc)
		if err != nil || string(got) != "got plain words" {
			t.Fatalf("backend answered %q, %v; want %q", got, err, "got plain words")
		}
	})
	t.Run("passed through", func(t *testing.T) {
		c, _ := rawConn(t, proxy)
		if got, err := getOverTLS(t, c, "passthrough.example.com"); err != nil || got != "pass sni=passthrough.example.com" {
			t.Fatalf("passthrough on the mixed port: %q, %v", got, err)
		}
	})
	if got := metricSum(t, reg, "coxswain_proxy_passthrough_connections_total", "outcome", "forwarded"); got != 2 {
		t.Errorf("forwarded connections counted %v, want 2", got)
	}
	eventually(t, "the terminated route's plaintext bytes counted", func() bool {
		return metricSum(t, reg, "coxswain_proxy_passthrough_bytes_total", "route", "ns/term/0/0") >= float64(len("plain words")+len("got plain words"))
	})
}

// recordedHello returns the first flight of a TLS client naming serverName: its ClientHello,
// as a client would send it, for tests that then stop answering.
func recordedHello(t *testing.T, serverName string) []byte {
	t.Helper()
	client, server := net.Pipe()
	defer func() { _ = client.Close(); _ = server.Close() }()
	go func() {
		_ = tls.Client(client, &tls.Config{ServerName: serverName, InsecureSkipVerify: true}).HandshakeContext(context.Background()) //nolint:gosec // never completes
	}()
	buf := make([]byte, 64<<10)
	_ = server.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := server.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

// Tests what a terminating virtual host does with clients that do not complete the handshake,
// and with a backend it cannot reach: each connection is closed, nothing reaches a backend,
// and each is counted with its reason.
func TestTLSTerminateRefusals(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	d := start(t, dataplane.Options{Registerer: reg, Listener: listener.Options{HeaderReadTimeout: 300 * time.Millisecond}})
	// A backend that counts the connections it gets and closes them.
	rec := newRawBackend(t, func(*rawBackend, *bufio.Reader, net.Conn) {})
	proxy, _ := terminatePort(t, d, rec.addr(), rec.addr(), nil)

	t.Run("a hello, then silence", func(t *testing.T) {
		c, _ := rawConn(t, proxy)
		if _, err := c.Write(recordedHello(t, "tls.example.com")); err != nil {
			t.Fatal(err)
		}
		// The proxy answers the hello (its flight up to Finished), then waits for the client's
		// Finished no longer than the header read timeout.
		begin := time.Now()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := io.Copy(io.Discard, c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the proxy kept a handshake that never ended open")
		}
		if took := time.Since(begin); took < 250*time.Millisecond {
			t.Errorf("closed after %s, before the timeout", took)
		}
		eventually(t, "handshake_failed counted", func() bool {
			return metricValue(t, reg, "coxswain_proxy_passthrough_connections_total", "handshake_failed") == 1
		})
	})
	t.Run("a client that accepts only TLS 1.1", func(t *testing.T) {
		c, _ := rawConn(t, proxy)
		tc := tls.Client(c, &tls.Config{ServerName: "tls.example.com", MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11, InsecureSkipVerify: true}) //nolint:gosec // refused before any certificate matters
		if err := tc.HandshakeContext(context.Background()); err == nil {
			t.Fatal("a TLS 1.1 handshake completed")
		}
		eventually(t, "handshake_failed counted", func() bool {
			return metricValue(t, reg, "coxswain_proxy_passthrough_connections_total", "handshake_failed") == 2
		})
	})
	t.Run("a client that does not trust the certificate", func(t *testing.T) {
		_, otherLeaf := snaptest.Certificate(t, "ns/other", "tls.example.com")
		if _, err := dialTerminated(t, proxy, "tls.example.com", otherLeaf); err == nil {
			t.Fatal("a client trusting another certificate completed the handshake")
		}
		eventually(t, "handshake_failed counted", func() bool {
			return metricValue(t, reg, "coxswain_proxy_passthrough_connections_total", "handshake_failed") == 3
		})
	})
	t.Run("no endpoint reachable", func(t *testing.T) {
		closed, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := closed.Addr().String()
		_ = closed.Close()
		proxy, leaf := terminatePort(t, d, dead, dead, nil)
		tc, err := dialTerminated(t, proxy, "tls.example.com", leaf)
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		// The proxy dials once the client is known: the connection then ends unanswered.
		expectClosed(t, tc, 5*time.Second)
		eventually(t, "backend_unavailable counted", func() bool {
			return metricValue(t, reg, "coxswain_proxy_passthrough_connections_total", "backend_unavailable") == 1
		})
	})
	if got := rec.conns.Load(); got != 0 {
		t.Errorf("the backend was connected to %d times, want never", got)
	}
	if got := metricSum(t, reg, "coxswain_proxy_passthrough_connections_total", "outcome", "forwarded"); got != 0 {
		t.Errorf("%v connections forwarded, want none", got)
	}
}

// Tests that a terminated stream whose backend has a BackendTLSPolicy is encrypted again: the
// proxy verifies the backend's certificate against the policy's CA for its server name and
// offers no ALPN; a backend whose certificate the policy does not trust gets nothing.
func TestTLSTerminateReencryptsForBackendTLSPolicy(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	d := start(t, dataplane.Options{Registerer: reg})
	ca := newTestCA(t, "backend-ca")
	served := make(chan tls.ConnectionState, 1)
	backend := tlsEchoBackend(t, ca.issue(t, leaf{dns: []string{"backend.example.com"}}), served)
	proxy, front := terminatePort(t, d, backend, backend, &discoveryv1.BackendTLS{ServerName: "backend.example.com", CaCertificatesPem: ca.pem})

	tc, err := dialTerminated(t, proxy, "tls.example.com", front)
	if err != nil {
		t.Fatalf("handshake with the proxy: %v", err)
	}
	if _, err := io.WriteString(tc, "ping\n"); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, len("echo ping\n"))
	if _, err := io.ReadFull(tc, line); err != nil || string(line) != "echo ping\n" {
		t.Fatalf("backend answered %q, %v", line, err)
	}
	st := <-served
	if st.ServerName != "backend.example.com" || st.NegotiatedProtocol != "" {
		t.Errorf("backend saw server name %q, ALPN %q; want backend.example.com and none", st.ServerName, st.NegotiatedProtocol)
	}

	t.Run("an untrusted backend", func(t *testing.T) {
		other := newTestCA(t, "other-ca")
		proxy, front := terminatePort(t, d, backend, backend, &discoveryv1.BackendTLS{ServerName: "backend.example.com", CaCertificatesPem: other.pem})
		tc, err := dialTerminated(t, proxy, "tls.example.com", front)
		if err != nil {
			t.Fatalf("handshake with the proxy: %v", err)
		}
		expectClosed(t, tc, 5*time.Second)
		eventually(t, "backend_unavailable counted", func() bool {
			return metricValue(t, reg, "coxswain_proxy_passthrough_connections_total", "backend_unavailable") == 1
		})
	})
}

// Tests that a TLS passthrough port that gains a listener in Terminate mode keeps its socket
// and the connections it forwards: both protocols read the ClientHello, so the port is not
// rebound.
func TestPassthroughPortTurningMixedKeepsItsConnections(t *testing.T) {
	t.Parallel()
	d := start(t, dataplane.Options{})
	sni := sniBackend(t, "pass")
	route := snaptest.Route("ns/pass/0/0", "passthrough.example.com", snaptest.Prefix("/"), "ns/pass:443")
	apply(t, d,
		snaptest.Listener("ns/gw", 8443, discoveryv1.Protocol_PROTOCOL_TLS_PASSTHROUGH, snaptest.VHost("pass", "passthrough.example.com", route)),
		snaptest.Cluster(t, "ns/pass:443", sni.Listener.Addr().String()))
	proxy := addr(t, d, 8443)
	c, _ := rawConn(t, proxy)
	tc := tls.Client(c, &tls.Config{ServerName: "passthrough.example.com", InsecureSkipVerify: true}) //nolint:gosec // the backend's test certificate
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.HandshakeContext(context.Background()); err != nil {
		t.Fatal(err)
	}

	terminatePort(t, d, halfCloseBackend(t), sni.Listener.Addr().String(), nil)
	if got := addr(t, d, 8443); got != proxy {
		t.Fatalf("the port moved from %s to %s: it was rebound", proxy, got)
	}
	if _, err := io.WriteString(tc, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(tc)
	if err != nil || !bytes.Contains(got, []byte("pass sni=passthrough.example.com")) {
		t.Fatalf("the open connection after the change: %q, %v", got, err)
	}
}

// tlsEchoBackend serves TLS with cert, reports each handshake's state on served (when it has
// room) and answers what it reads first with "echo " and those bytes.
func tlsEchoBackend(t *testing.T, cert tls.Certificate, served chan<- tls.ConnectionState) string {
	t.Helper()
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	return newRawBackend(t, func(_ *rawBackend, _ *bufio.Reader, c net.Conn) {
		tc := tls.Server(c, cfg)
		_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
		if tc.HandshakeContext(context.Background()) != nil {
			return
		}
		select {
		case served <- tc.ConnectionState():
		default:
		}
		buf := make([]byte, 4096)
		n, _ := tc.Read(buf)
		_, _ = io.WriteString(tc, "echo "+string(buf[:n]))
	}).addr()
}
