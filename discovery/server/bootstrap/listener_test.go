package bootstrap

import (
	"context"
	"crypto/tls"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/servertest"
)

// listenerEnv is a bootstrap service served behind its connection limits.
type listenerEnv struct {
	*env
	conns *Connections
	addr  string
}

func newListenerEnv(t *testing.T, cc ConnectionsConfig, configure ...func(*Config)) *listenerEnv {
	t.Helper()
	e := newEnv(t, configure...)
	raw, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cc.Registerer = e.registry
	conns, err := NewConnections(cc)
	if err != nil {
		t.Fatal(err)
	}
	gs, err := e.svc.NewGRPCServer(e.pki.BootstrapServerTLS(), conns.ServerOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- gs.Serve(conns.Listener(raw)) }()
	t.Cleanup(func() {
		gs.Stop()
		t.Logf("serve ended: %v", <-done)
	})
	return &listenerEnv{env: e, conns: conns, addr: raw.Addr().String()}
}

// connEnds counts the connections of a client that ended.
type connEnds struct{ ended atomic.Int32 }

func (c *connEnds) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (c *connEnds) HandleRPC(context.Context, stats.RPCStats)                         {}
func (c *connEnds) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (c *connEnds) HandleConn(_ context.Context, s stats.ConnStats) {
	if _, ok := s.(*stats.ConnEnd); ok {
		c.ended.Add(1)
	}
}

// dial connects a gRPC client from source, a loopback address; opts come after the dialer.
func (e *listenerEnv) dial(t *testing.T, source string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	return dialFrom(t, e.addr, source, e.pki.BootstrapClientTLS(), opts...)
}

// clientFrom dials the listener from source (a loopback address), presenting cert if not nil.
func (e *listenerEnv) clientFrom(t *testing.T, source string, cert *tls.Certificate) discoveryv1.DiscoveryClient {
	t.Helper()
	return discoveryv1.NewDiscoveryClient(dialFrom(t, e.addr, source, presenting(e.pki.BootstrapClientTLS(), cert)))
}

// dialFrom connects a gRPC client with cfg to addr from source, a loopback address; opts come
// after the dialer.
func dialFrom(t *testing.T, addr, source string, cfg *tls.Config, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}}
	opts = append([]grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		return dialer.DialContext(ctx, "tcp", addr)
	})}, opts...)
	return servertest.Dial(t, addr, cfg, opts...)
}

// presenting makes cfg present cert as its client certificate, when cert is not nil.
func presenting(cfg *tls.Config, cert *tls.Certificate) *tls.Config {
	if cert != nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	return cfg
}

// silent opens n TCP connections from source that send nothing, closed when the test ends.
func (e *listenerEnv) silent(t *testing.T, source string, n int) []net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 5 * time.Second}
	conns := make([]net.Conn, 0, n)
	for range n {
		conn, err := d.DialContext(t.Context(), "tcp", e.addr)
		if err != nil {
			t.Fatalf("dial from %s: %v", source, err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		conns = append(conns, conn)
	}
	return conns
}

func (e *listenerEnv) refused(reason string) float64 {
	return testutil.ToFloat64(e.conns.refused.WithLabelValues(reason))
}

// pollUntil polls cond until it holds or a deadline passes.
func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Tests that one source address takes only its share of the bootstrap listener's connections:
// beyond it they are closed at accept, and a proxy from another address still bootstraps.
func TestBootstrapConnectionsPerSourceAreCapped(t *testing.T) {
	t.Parallel()
	e := newListenerEnv(t, ConnectionsConfig{MaxConnections: 8, MaxConnectionsPerSource: 4})
	e.silent(t, "127.0.0.2", 12)
	pollUntil(t, "the flood to be refused", func() bool { return e.refused("TooManyConnectionsFromSource") == 8 })
	c := discoveryv1.NewDiscoveryClient(e.dial(t, "127.0.0.3"))
	if _, err := c.Bootstrap(t.Context(), request(t)); err != nil {
		t.Fatalf("a proxy's bootstrap while one source holds its share: %v", err)
	}
}

// Tests that the bootstrap listener holds at most its maximum and reserved connections, whoever
// opens them; one beyond is closed at accept.
func TestBootstrapConnectionsAreCappedInTotal(t *testing.T) {
	t.Parallel()
	e := newListenerEnv(t, ConnectionsConfig{MaxConnections: 4, ReservedConnections: 2, MaxConnectionsPerSource: 2})
	for _, source := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.5"} {
		e.silent(t, source, 2)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	_, err := discoveryv1.NewDiscoveryClient(e.dial(t, "127.0.0.4")).Bootstrap(ctx, request(t), grpc.WaitForReady(false))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a bootstrap beyond the cap: %v, want Unavailable", err)
	}
	if got := e.refused("TooManyConnections"); got < 1 {
		t.Errorf("refused{TooManyConnections} = %v, want at least 1", got)
	}
}

// Tests that health checks do not keep a bootstrap connection alive: a client that checks
// health far more often than the idle limit, and never bootstraps, sees its connection closed.
func TestHealthChecksDoNotKeepABootstrapConnectionAlive(t *testing.T) {
	t.Parallel()
	e := newListenerEnv(t, ConnectionsConfig{MaxConnections: 8, MaxConnectionsPerSource: 4, MaxConnectionIdle: 300 * time.Millisecond})
	ends := &connEnds{}
	health := healthpb.NewHealthClient(e.dial(t, "127.0.0.2", grpc.WithStatsHandler(ends)))
	deadline := time.Now().Add(5 * time.Second)
	for ends.ended.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("health checks every 50 ms kept the connection open for 5 s past an idle limit of 300 ms")
		}
		_, _ = health.Check(t.Context(), &healthpb.HealthCheckRequest{})
		time.Sleep(50 * time.Millisecond) // the attacker's pace, not synchronisation
	}
}

// Tests that a bootstrap call in progress keeps its connection past the idle limit.
func TestABootstrapInProgressIsNotIdle(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	e := newListenerEnv(t, ConnectionsConfig{MaxConnections: 8, MaxConnectionsPerSource: 4, MaxConnectionIdle: 200 * time.Millisecond},
		func(c *Config) { c.Authenticator = &fakeAuthenticator{principal: sharedProxy, gate: gate} })
	time.AfterFunc(time.Second, func() { close(gate) })
	if _, err := discoveryv1.NewDiscoveryClient(e.dial(t, "127.0.0.2")).Bootstrap(t.Context(), request(t)); err != nil {
		t.Fatalf("a bootstrap that outlasts the idle limit: %v", err)
	}
}

// Tests that a bootstrap connection lives no longer than the maximum age, busy or not.
func TestBootstrapConnectionsLiveNoLongerThanTheirAge(t *testing.T) {
	t.Parallel()
	e := newListenerEnv(t, ConnectionsConfig{MaxConnections: 8, MaxConnectionsPerSource: 4, MaxConnectionAge: 300 * time.Millisecond})
	ends := &connEnds{}
	c := discoveryv1.NewDiscoveryClient(e.dial(t, "127.0.0.2", grpc.WithStatsHandler(ends)))
	deadline := time.Now().Add(5 * time.Second)
	for ends.ended.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a busy connection lived 5 s past a maximum age of 300 ms")
		}
		if _, err := c.Bootstrap(t.Context(), request(t)); err != nil {
			t.Fatalf("bootstrap: %v", err)
		}
	}
}

// Tests that idle TLS connections from many source addresses, each within its share, filling
// the bootstrap listener's cap (64 addresses of 16 at the defaults; -short scales it down) leave
// proxies renewing with a valid SVID their slots: the ten renewals succeed, a first bootstrap
// (no SVID) is refused at the end of its handshake, and so is one presenting an SVID of another
// CA.
func TestAnIdleTLSFloodLeavesRenewalsTheirSlots(t *testing.T) {
	t.Parallel()
	maxConns, perSource := DefaultMaxConnections, DefaultMaxConnectionsPerSource
	if testing.Short() {
		maxConns, perSource = 64, 4
	}
	e := newListenerEnv(t, ConnectionsConfig{MaxConnections: maxConns, MaxConnectionsPerSource: perSource})
	for _, source := range loopbacks("127.0.4", maxConns/perSource) {
		for range perSource {
			conn := idleHTTP2(t, e.addr, source)
			t.Cleanup(func() { _ = conn.Close() })
		}
	}
	pollUntil(t, "the flood to hold the cap", func() bool { common, _ := e.conns.listeners.Settled(); return common == maxConns })
	svid := e.pki.SVID(t, "spiffe://cluster.local/ns/coxswain-system/sa/coxswain-shared-proxy")
	renewed := 0
	for _, source := range loopbacks("127.0.5", 10) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err := e.clientFrom(t, source, svid).Bootstrap(ctx, request(t), grpc.WaitForReady(false))
		cancel()
		if err != nil {
			t.Errorf("renewal from %s during the flood: %v", source, err)
			continue
		}
		renewed++
	}
	t.Logf("%d of 10 renewals succeeded while %d idle TLS connections held the cap", renewed, maxConns)
	if _, reserved := e.conns.listeners.Settled(); reserved != renewed {
		t.Errorf("%d connections hold reserved slots, want the %d renewals'", reserved, renewed)
	}
	for name, cert := range map[string]*tls.Certificate{
		"a first bootstrap":                      nil,
		"a bootstrap with an SVID of another CA": servertest.NewPKI(t).SVID(t, "spiffe://cluster.local/ns/coxswain-system/sa/coxswain-shared-proxy"),
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err := e.clientFrom(t, "127.0.6.1", cert).Bootstrap(ctx, request(t), grpc.WaitForReady(false))
		cancel()
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%s during the flood: %v, want Unavailable", name, err)
		}
	}
	if got := e.refused("TooManyUnverifiedConnections"); got < 2 {
		t.Errorf("refused{TooManyUnverifiedConnections} = %v, want at least 2", got)
	}
}
