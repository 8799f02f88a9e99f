package stream

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"coxswain.dev/coxswain/discovery/server/cache"
)

// Tests that one identity cannot hold more live streams than its cap, that a new stream of a
// node it already holds still supersedes, and that other identities are not affected.
func TestStreamsPerIdentityAreCapped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.MaxStreamsPerIdentity = 2 })
	cert := e.pki.SVID(t, webID)
	c := e.client(t, cert)
	a := open(t, c, subscribeMessage("a", webScope))
	a.mustRecv()
	b := open(t, c, subscribeMessage("b", webScope))
	b.mustRecv()
	snap, err := open(t, c, subscribeMessage("c", webScope)).recv()
	if status.Code(err) != codes.ResourceExhausted || snap != nil {
		t.Fatalf("third stream: snapshot %v, error %v; want ResourceExhausted and nothing", snap, err)
	}
	if got := testutil.ToFloat64(e.srv.metrics.denied.WithLabelValues(string(ReasonTooManyStreams))); got != 1 {
		t.Errorf("closed{TooManyStreams} = %v, want 1", got)
	}
	open(t, c, subscribeMessage("b", webScope)).mustRecv()
	if _, err := b.recv(); status.Code(err) != codes.Aborted {
		t.Fatalf("superseded stream: %v, want Aborted", err)
	}
	e.subscribe(t, apiID, "a", apiScope).mustRecv()
}

// Tests that the listener holds at most MaxStreams streams, whoever opens them.
func TestStreamsAreCappedInTotal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.MaxStreams = 2 })
	e.subscribe(t, webID, "a", webScope).mustRecv()
	e.subscribe(t, apiID, "a", apiScope).mustRecv()
	if _, err := e.subscribe(t, sharedID, "a", cache.SharedPool()).recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third stream: %v, want ResourceExhausted", err)
	}
	if got := testutil.ToFloat64(e.srv.metrics.denied.WithLabelValues(string(ReasonTooManyStreams))); got != 1 {
		t.Errorf("closed{TooManyStreams} = %v, want 1", got)
	}
}

// Tests that a snapshot neither ACKed nor NACKed within the deadline closes its stream, whether
// the proxy reads it or not, and that the listener then forgets the stream.
func TestUnansweredSnapshotClosesTheStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.AckTimeout = 300 * time.Millisecond })
	reader := e.subscribe(t, webID, "reader", webScope)
	reader.mustRecv()
	e.subscribe(t, apiID, "sleeper", apiScope) // never reads
	if _, err := reader.recv(); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
	waitFor(t, "both streams closed for want of an answer", func() bool {
		return testutil.ToFloat64(e.srv.metrics.denied.WithLabelValues(string(ReasonAckTimeout))) == 2
	})
	waitFor(t, "the gauge to empty", func() bool { return testutil.CollectAndCount(e.srv.metrics.connected) == 0 })
}

// readUntilClosed reads conn until the server closes it, failing after within.
func readUntilClosed(t *testing.T, conn net.Conn, within time.Duration) {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(within)); err != nil {
		t.Fatal(err)
	}
	_, err := io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the connection open for %s", within)
	}
}

// Tests that a connection that never completes its TLS handshake is closed at the deadline.
func TestStreamListenerClosesSilentHandshakes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.HandshakeTimeout = 300 * time.Millisecond })
	conn, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	readUntilClosed(t, conn, 5*time.Second)
}

// Tests that an mTLS connection that opens no stream is closed after the idle limit.
func TestStreamListenerClosesIdleConnections(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.MaxConnectionIdle = 300 * time.Millisecond })
	cfg := e.pki.StreamClientTLS(e.pki.SVID(t, webID))
	cfg.NextProtos = []string{"h2"}
	d := tls.Dialer{Config: cfg}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The HTTP/2 client preface and an empty SETTINGS frame: a connection, but no stream. The
	// server's drain waits up to 5 s for this client, which answers no ping, before it closes.
	if _, err := io.WriteString(conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"); err != nil {
		t.Fatal(err)
	}
	readUntilClosed(t, conn, 15*time.Second)
}

// Tests that the listener holds at most MaxConnections connections: one beyond is closed before
// any TLS work, and a slot freed by a closed connection is taken again.
func TestStreamConnectionsAreCapped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.MaxConnections = 2 })
	gs, err := e.srv.NewGRPCServer(e.pki.StreamServerTLS())
	if err != nil {
		t.Fatal(err)
	}
	lis, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- gs.Serve(e.srv.Listener(lis)) }()
	t.Cleanup(func() {
		gs.Stop()
		t.Logf("serve ended: %v", <-done)
	})
	addr := lis.Addr().String()

	handshake := func() (*tls.Conn, error) {
		d := tls.Dialer{Config: e.pki.StreamClientTLS(e.pki.SVID(t, webID))}
		d.Config.NextProtos = []string{"h2"}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return conn.(*tls.Conn), nil
	}
	first, err := handshake()
	if err != nil {
		t.Fatal(err)
	}
	second, err := handshake()
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if _, err := handshake(); err == nil {
		t.Fatal("a third connection completed its handshake")
	}
	if got := testutil.ToFloat64(e.srv.metrics.denied.WithLabelValues(string(ReasonTooManyConnections))); got != 1 {
		t.Errorf("closed{TooManyConnections} = %v, want 1", got)
	}
	_ = first.Close()
	waitFor(t, "the freed slot to be taken", func() bool {
		conn, err := handshake()
		if err != nil {
			return false
		}
		_ = conn.Close()
		return true
	})
}

// dialFrom opens a TCP connection to addr from the loopback address source, and closes it when
// the test ends.
func dialFrom(t *testing.T, source, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 5 * time.Second}
	conn, err := d.DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", source, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// handshakeFrom completes an mTLS handshake with cert from source, or fails.
func (e *env) handshakeFrom(t *testing.T, source string, cert *tls.Certificate) error {
	t.Helper()
	cfg := e.pki.StreamClientTLS(cert)
	cfg.NextProtos = []string{"h2"}
	d := tls.Dialer{NetDialer: &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}}, Config: cfg}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", e.addr)
	if err != nil {
		return err
	}
	// TLS 1.3: the server's verdict on the client certificate arrives with the first read.
	_ = conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err = conn.Read(make([]byte, 1))
	_ = conn.Close()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil
	}
	if err == nil {
		return nil
	}
	return err
}

func refusedConnections(e *env) float64 {
	return testutil.ToFloat64(e.srv.metrics.denied.WithLabelValues(string(ReasonTooManyConnections))) +
		testutil.ToFloat64(e.srv.metrics.denied.WithLabelValues(string(ReasonTooManyConnectionsFromSource)))
}

// Tests that one source address holding silent connections (no TLS, up to the handshake limit)
// takes only its share of the listener: beyond it its connections are closed at accept, and a
// proxy from another address still opens its stream at once.
func TestOneSourceTakesOnlyItsShareOfConnections(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.MaxConnections, c.MaxConnectionsPerSource = 8, 4 })
	for range 12 {
		dialFrom(t, "127.0.0.2", e.addr)
	}
	waitFor(t, "the attacker's connections to be accepted or refused", func() bool { return refusedConnections(e) >= 4 })
	if err := e.handshakeFrom(t, "127.0.0.3", e.pki.SVID(t, webID)); err != nil {
		t.Fatalf("a connection from another source: %v", err)
	}
	p := e.subscribe(t, apiID, "api", apiScope)
	if _, err := p.recv(); err != nil {
		t.Fatalf("a proxy's stream while one source holds silent connections: %v", err)
	}
	if got := testutil.ToFloat64(e.srv.metrics.denied.WithLabelValues(string(ReasonTooManyConnectionsFromSource))); got != 8 {
		t.Errorf("closed{TooManyConnectionsFromSource} = %v, want 8", got)
	}
}

// Tests that while more than half the connection cap is taken, a new connection must finish its
// handshake within the busy deadline: sources that fill the cap with silent connections hold the
// slots above half for that long only, not the whole handshake timeout.
func TestSilentConnectionsAboveHalfTheCapAreClosedSoon(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) {
		c.MaxConnections, c.MaxConnectionsPerSource = 8, 4
		c.HandshakeTimeout, c.BusyHandshakeTimeout = 20*time.Second, 300*time.Millisecond
	})
	var silent []net.Conn
	for _, source := range []string{"127.0.0.2", "127.0.0.3"} {
		for range 4 {
			silent = append(silent, dialFrom(t, source, e.addr))
		}
	}
	start := time.Now()
	cert := e.pki.SVID(t, webID)
	deadline := start.Add(5 * time.Second)
	for e.handshakeFrom(t, "127.0.0.1", cert) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("no handshake within %s while silent connections fill the cap", time.Since(start))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("a proxy's handshake succeeded %s after the cap was filled", time.Since(start))
	readUntilClosed(t, silent[len(silent)-1], 3*time.Second)
	if refusedConnections(e) == 0 {
		t.Error("no connection was refused while the cap was full")
	}
}
