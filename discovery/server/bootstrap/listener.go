package bootstrap

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/internal/connlimit"
	"coxswain.dev/coxswain/discovery/server/internal/quiet"
)

// Defaults of the bootstrap listener's connection limits.
const (
	// DefaultMaxConnections is how many connections the bootstrap listener holds at once. An
	// idle TLS one costs about 60 KiB (50 KiB of heap, 10 KiB of stacks) and three goroutines,
	// so the cap bounds them to about 60 MiB.
	DefaultMaxConnections = 1024
	// DefaultMaxConnectionsPerSource is how many of them one source address may hold: a proxy
	// needs one, for a few seconds about twice a day.
	DefaultMaxConnectionsPerSource = 16
	// DefaultReservedConnections is how many connections beyond DefaultMaxConnections the
	// listener keeps for callers whose handshake presented an SVID that verifies against the
	// trust bundle, proxies renewing: a flood of connections without one cannot take them.
	// A renewal holds one for a few seconds, about twice a day per proxy.
	DefaultReservedConnections = 256
	// DefaultBusyHandshakeTimeout bounds the handshake of a connection accepted while more than
	// half the cap is taken, in place of the 10 s handshake timeout.
	DefaultBusyHandshakeTimeout = 2 * time.Second
	// DefaultMaxConnectionIdle closes a connection that has had no Bootstrap call for that long;
	// health checks and refused calls do not count.
	DefaultMaxConnectionIdle = 2 * time.Minute
	// DefaultMaxConnectionAge closes any connection that old, busy or not, after
	// connectionAgeGrace for the call in progress.
	DefaultMaxConnectionAge = 5 * time.Minute
	// connectionAgeGrace bounds a call in progress on a connection past its age: a bootstrap
	// waits in the queue for QueueWait at most, then reviews and signs.
	connectionAgeGrace = 15 * time.Second
)

// ConnectionsConfig configures Connections; zero fields take their defaults.
type ConnectionsConfig struct {
	// MaxConnections caps the connections open at once, MaxConnectionsPerSource those of one
	// source address; connections beyond are closed at accept, before any TLS work.
	MaxConnections          int
	MaxConnectionsPerSource int
	// ReservedConnections are slots beyond MaxConnections for connections whose handshake
	// presented an SVID that verifies against the current trust bundle: accept takes up to
	// MaxConnections+ReservedConnections, and at the end of its handshake a connection without
	// such an SVID is closed when MaxConnections others without one are open. Negative reserves
	// none.
	ReservedConnections int
	// BusyHandshakeTimeout bounds the handshake of connections accepted above half of MaxConnections.
	BusyHandshakeTimeout time.Duration
	// MaxConnectionIdle closes a connection without a Bootstrap call for that long.
	MaxConnectionIdle time.Duration
	// MaxConnectionAge closes a connection that old.
	MaxConnectionAge time.Duration
	// Registerer receives the metrics; nil leaves them unregistered.
	Registerer prometheus.Registerer
	Logger     logr.Logger
}

func (c *ConnectionsConfig) defaults() {
	c.MaxConnections = limitOr(c.MaxConnections, DefaultMaxConnections)
	c.MaxConnectionsPerSource = limitOr(c.MaxConnectionsPerSource, DefaultMaxConnectionsPerSource)
	if c.ReservedConnections == 0 {
		c.ReservedConnections = DefaultReservedConnections
	}
	c.ReservedConnections = max(c.ReservedConnections, 0)
	c.BusyHandshakeTimeout = limitOr(c.BusyHandshakeTimeout, DefaultBusyHandshakeTimeout)
	c.MaxConnectionIdle = limitOr(c.MaxConnectionIdle, DefaultMaxConnectionIdle)
	c.MaxConnectionAge = limitOr(c.MaxConnectionAge, DefaultMaxConnectionAge)
}

// limitOr returns v, or def when v is not positive.
func limitOr[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// Connections are the connection limits of the bootstrap listener. Build the gRPC server with
// its ServerOptions and serve it on what Listener returns.
type Connections struct {
	cfg     ConnectionsConfig
	refused *prometheus.CounterVec
	log     logr.Logger
	quiet   *quiet.Limiter

	listeners connlimit.Set
}

// NewConnections fills in the defaults of cfg and registers the refusal metric.
func NewConnections(cfg ConnectionsConfig) (*Connections, error) {
	cfg.defaults()
	c := &Connections{
		cfg: cfg, log: cfg.Logger, quiet: quiet.New(quiet.DefaultBurst, quiet.DefaultInterval),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coxswain_discovery_bootstrap_connections_refused_total",
			Help: "Connections the bootstrap listener closed at accept (TooManyConnections, TooManyConnectionsFromSource) " +
				"or at the end of their handshake (TooManyUnverifiedConnections), by reason.",
		}, []string{"reason"}),
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(c.refused); err != nil {
			return nil, fmt.Errorf("register bootstrap listener metrics: %w", err)
		}
	}
	return c, nil
}

// Listener wraps lis, the bootstrap listener's socket: at most MaxConnections+ReservedConnections
// connections open at once and MaxConnectionsPerSource from one source address, those beyond
// closed as soon as accepted, before any TLS work, and counted as refused; at the end of its
// handshake a connection whose caller presented no SVID that verifies against the trust bundle
// is closed and counted when MaxConnections such connections are open, so that proxies renewing
// keep ReservedConnections slots whatever a flood holds; above half the cap a new connection must
// finish its handshake within BusyHandshakeTimeout; a connection without a Bootstrap call for
// MaxConnectionIdle is closed.
func (c *Connections) Listener(lis net.Listener) net.Listener {
	return c.listeners.New(lis, connlimit.Config{
		Max: c.cfg.MaxConnections, Reserved: c.cfg.ReservedConnections, PerSource: c.cfg.MaxConnectionsPerSource,
		BusyHandshakeTimeout: c.cfg.BusyHandshakeTimeout, IdleTimeout: c.cfg.MaxConnectionIdle,
		Refused: c.refusedConnection,
	})
}

// ServerOptions are the options NewGRPCServer takes to serve on c's listeners: only Bootstrap
// calls count as activity, and connections end at the maximum age.
func (c *Connections) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(c.activity),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: c.cfg.MaxConnectionIdle,
			MaxConnectionAge:  c.cfg.MaxConnectionAge, MaxConnectionAgeGrace: connectionAgeGrace,
			Time: discoveryv1.KeepaliveInterval, Timeout: discoveryv1.KeepaliveTimeout,
		}),
	}
}

// activity marks the connection of a Bootstrap call busy while the call runs.
func (c *Connections) activity(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if info.FullMethod == discoveryv1.Discovery_Bootstrap_FullMethodName {
		if conn := c.connection(ctx); conn != nil {
			defer conn.Busy()()
		}
	}
	return handler(ctx, req)
}

// connection returns the connection of the call of ctx, nil when none of c's listeners holds it.
func (c *Connections) connection(ctx context.Context) *connlimit.Conn {
	return c.listeners.ConnOf(ctx)
}

// refusedConnection counts and logs, unless logged too often lately, a connection closed at accept.
func (c *Connections) refusedConnection(reason connlimit.Reason, source string) {
	c.refused.WithLabelValues(string(reason)).Inc()
	if ok, suppressed := c.quiet.Allow(string(reason)+" "+source, time.Now()); ok {
		c.log.Info("Refused bootstrap connection", "source", source, "reason", reason, "suppressed", suppressed)
	}
}
