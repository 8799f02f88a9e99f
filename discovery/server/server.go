package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"

	"coxswain.dev/coxswain/discovery/server/bootstrap"
	"coxswain.dev/coxswain/discovery/server/stream"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// DefaultShutdownGrace is how long in-flight calls may take to finish on shutdown.
const DefaultShutdownGrace = 10 * time.Second

// Config configures a Server. Every field but the addresses, ShutdownGrace and Logger is required.
type Config struct {
	// BootstrapAddr and StreamAddr are the listen addresses, ":50052" and ":50051" when empty.
	BootstrapAddr string
	StreamAddr    string
	// BootstrapTLS is tlsconfig.BootstrapServer; StreamTLS is tlsconfig.MTLSServer.
	BootstrapTLS *tls.Config
	StreamTLS    *tls.Config
	Bootstrap    *bootstrap.Service
	Stream       *stream.Server
	// BootstrapConnections are the bootstrap listener's connection limits; zero fields take
	// their defaults.
	BootstrapConnections bootstrap.ConnectionsConfig
	// ShutdownGrace bounds the graceful stop; DefaultShutdownGrace when zero.
	ShutdownGrace time.Duration
	Logger        logr.Logger
}

// Server is the pair of discovery listeners.
type Server struct {
	cfg       Config
	bootstrap *grpc.Server
	conns     *bootstrap.Connections
	stream    *grpc.Server
}

// New builds both gRPC servers; it fails when a service or TLS config is missing or the stream
// TLS config does not demand verified client certificates.
func New(cfg Config) (*Server, error) {
	if cfg.Bootstrap == nil || cfg.Stream == nil {
		return nil, errors.New("server: bootstrap and stream services are required")
	}
	if cfg.BootstrapAddr == "" {
		cfg.BootstrapAddr = ":" + strconv.Itoa(wellknown.BootstrapPort)
	}
	if cfg.StreamAddr == "" {
		cfg.StreamAddr = ":" + strconv.Itoa(wellknown.StreamPort)
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = DefaultShutdownGrace
	}
	conns, err := bootstrap.NewConnections(cfg.BootstrapConnections)
	if err != nil {
		return nil, fmt.Errorf("bootstrap listener: %w", err)
	}
	b, err := cfg.Bootstrap.NewGRPCServer(cfg.BootstrapTLS, conns.ServerOptions()...)
	if err != nil {
		return nil, fmt.Errorf("bootstrap listener: %w", err)
	}
	s, err := cfg.Stream.NewGRPCServer(cfg.StreamTLS)
	if err != nil {
		return nil, fmt.Errorf("stream listener: %w", err)
	}
	return &Server{cfg: cfg, bootstrap: b, conns: conns, stream: s}, nil
}

// Run listens on the configured addresses and serves until ctx ends; see Serve.
func (s *Server) Run(ctx context.Context) error {
	var lc net.ListenConfig
	bl, err := lc.Listen(ctx, "tcp", s.cfg.BootstrapAddr)
	if err != nil {
		return fmt.Errorf("listen for bootstrap: %w", err)
	}
	sl, err := lc.Listen(ctx, "tcp", s.cfg.StreamAddr)
	if err != nil {
		_ = bl.Close()
		return fmt.Errorf("listen for streams: %w", err)
	}
	return s.Serve(ctx, bl, sl)
}

// Serve serves bootstrap on bl and streams on sl, each behind its connection limits, until ctx ends or a listener fails, then closes
// every live stream (so proxies reconnect elsewhere) and stops both servers gracefully, forcing
// them after the shutdown grace. It returns nil after a shutdown through ctx. A Server serves once.
func (s *Server) Serve(ctx context.Context, bl, sl net.Listener) error {
	errs := make(chan error, 2)
	go func() { errs <- serve("bootstrap", s.bootstrap, s.conns.Listener(bl)) }()
	go func() { errs <- serve("stream", s.stream, s.cfg.Stream.Listener(sl)) }()
	s.cfg.Logger.Info("Serving discovery", "bootstrapAddr", bl.Addr().String(), "streamAddr", sl.Addr().String())
	var first error
	select {
	case <-ctx.Done():
	case first = <-errs:
	}
	s.cfg.Logger.Info("Stopping discovery", "grace", s.cfg.ShutdownGrace)
	s.cfg.Stream.Shutdown()
	StopGracefully(s.stream, s.cfg.ShutdownGrace)
	StopGracefully(s.bootstrap, s.cfg.ShutdownGrace)
	rest := []error{first, <-errs}
	if first == nil {
		rest = append(rest, <-errs)
	}
	return errors.Join(rest...)
}

func serve(name string, gs *grpc.Server, lis net.Listener) error {
	if err := gs.Serve(lis); err != nil {
		return fmt.Errorf("serve %s on %s: %w", name, lis.Addr(), err)
	}
	return nil
}

// StopGracefully stops gs: it waits up to grace for in-flight calls, then cuts them off.
func StopGracefully(gs *grpc.Server, grace time.Duration) {
	done := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(done)
	}()
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		gs.Stop()
		<-done
	}
}
