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
	"google.golang.org/grpc/peer"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/internal/connlimit"
	"coxswain.dev/coxswain/discovery/server/internal/quiet"
)

// Defaults of the bootstrap listener's connection limits.
const (
	// DefaultMaxConnections is how many connections the bootstrap listener holds at once. An
	// idle one costs about 70 KiB and three goroutines, so the cap bounds them to about 70 MiB.
	DefaultMaxConnections = 1024
	// DefaultMaxConnectionsPerSource is how many of them one source address may hold: a proxy
	// needs one, for a few seconds about twice a day.
	DefaultMaxConnectionsPerSource = 16
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

// ListenerConfig configures a Listener; zero fields take their defaults.
type ListenerConfig struct {
	// MaxConnections caps the connections open at once, MaxConnectionsPerSource those of one
	// source address; connections beyond are closed at accept, before any TLS work.
	MaxConnections          int
	MaxConnectionsPerSource int
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

func (c *ListenerConfig) defaults() {
	c.MaxConnections = limitOr(c.MaxConnections, DefaultMaxConnections)
	c.MaxConnectionsPerSource = limitOr(c.MaxConnectionsPerSource, DefaultMaxConnectionsPerSource)
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

// Listener is the bootstrap listener's socket behind its connection limits. Serve the gRPC
// server built with its ServerOptions on it.
type Listener struct {
	*connlimit.Listener
	cfg     ListenerConfig
	refused *prometheus.CounterVec
	log     logr.Logger
	quiet   *quiet.Limiter
}

// NewListener wraps lis with the limits of cfg and registers the refusal metric.
func NewListener(lis net.Listener, cfg ListenerConfig) (*Listener, error) {
	cfg.defaults()
	l := &Listener{
		cfg: cfg, log: cfg.Logger, quiet: quiet.New(quiet.DefaultBurst, quiet.DefaultInterval),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coxswain_discovery_bootstrap_connections_refused_total",
			Help: "Connections the bootstrap listener closed at accept, by reason (TooManyConnections, TooManyConnectionsFromSource).",
		}, []string{"reason"}),
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(l.refused); err != nil {
			return nil, fmt.Errorf("register bootstrap listener metrics: %w", err)
		}
	}
	l.Listener = connlimit.New(lis, connlimit.Config{
		Max: cfg.MaxConnections, PerSource: cfg.MaxConnectionsPerSource,
		BusyHandshakeTimeout: cfg.BusyHandshakeTimeout, IdleTimeout: cfg.MaxConnectionIdle,
		Refused: l.refusedConnection,
	})
	return l, nil
}

// ServerOptions are the options NewGRPCServer needs to serve on l: only Bootstrap calls count
// as activity, and connections end at the maximum age.
func (l *Listener) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(l.activity),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: l.cfg.MaxConnectionIdle,
			MaxConnectionAge:  l.cfg.MaxConnectionAge, MaxConnectionAgeGrace: connectionAgeGrace,
			Time: discoveryv1.KeepaliveInterval, Timeout: discoveryv1.KeepaliveTimeout,
		}),
	}
}

// activity marks the connection of a Bootstrap call busy while the call runs.
func (l *Listener) activity(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if info.FullMethod == discoveryv1.Discovery_Bootstrap_FullMethodName {
		if p, ok := peer.FromContext(ctx); ok {
			if c := l.Lookup(p.LocalAddr, p.Addr); c != nil {
				defer c.Busy()()
			}
		}
	}
	return handler(ctx, req)
}

// refusedConnection counts and logs, unless logged too often lately, a connection closed at accept.
func (l *Listener) refusedConnection(reason connlimit.Reason, source string) {
	l.refused.WithLabelValues(string(reason)).Inc()
	if ok, suppressed := l.quiet.Allow(string(reason)+" "+source, time.Now()); ok {
		l.log.Info("Refused bootstrap connection", "source", source, "reason", reason, "suppressed", suppressed)
	}
}
