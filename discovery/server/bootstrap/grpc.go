package bootstrap

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/internal/connlimit"
)

const (
	// handshakeTimeout bounds a connection's TLS handshake.
	handshakeTimeout = 10 * time.Second
	// maxIdle closes bootstrap connections nobody uses: a proxy bootstraps about twice a day.
	// Connections.ServerOptions count only Bootstrap calls as use.
	maxIdle = DefaultMaxConnectionIdle
	// maxConcurrentStreams bounds the calls one connection may have in progress.
	maxConcurrentStreams = 4
)

// NewGRPCServer returns the gRPC server of the bootstrap listener with s registered: TLS 1.3
// with tlsConfig (tlsconfig.BootstrapServer), only the Bootstrap method reachable, request size
// capped, connections closed when idle and at DefaultMaxConnectionAge. opts come last: pass
// Connections.ServerOptions and serve on Connections.Listener to cap connections in total and
// per source and count only Bootstrap calls as activity. There is no way to build it without TLS.
func (s *Service) NewGRPCServer(tlsConfig *tls.Config, opts ...grpc.ServerOption) (*grpc.Server, error) {
	if tlsConfig == nil {
		return nil, errors.New("bootstrap: a TLS config is required")
	}
	cfg := tlsConfig.Clone()
	cfg.MinVersion = tls.VersionTLS13
	base := []grpc.ServerOption{
		grpc.Creds(settlingCreds{TransportCredentials: credentials.NewTLS(cfg), verified: s.verifiedID}),
		// Stop and GracefulStop return only after every handler has: nothing outlives a stop.
		grpc.WaitForHandlers(true),
		grpc.ChainUnaryInterceptor(s.unaryInterceptor),
		grpc.ChainStreamInterceptor(s.streamInterceptor),
		grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
			return status.Error(ReasonMethodNotAllowed.Code(), "unknown method")
		}),
		grpc.MaxRecvMsgSize(discoveryv1.MaxBootstrapRequestBytes),
		grpc.ConnectionTimeout(handshakeTimeout),
		// A proxy needs one call at a time; more from one connection only multiply a flood.
		grpc.MaxConcurrentStreams(maxConcurrentStreams),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: discoveryv1.KeepaliveMinInterval}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: maxIdle, Time: discoveryv1.KeepaliveInterval, Timeout: discoveryv1.KeepaliveTimeout,
			MaxConnectionAge: DefaultMaxConnectionAge, MaxConnectionAgeGrace: connectionAgeGrace,
		}),
	}
	gs := grpc.NewServer(append(base, opts...)...)
	discoveryv1.RegisterDiscoveryServer(gs, s)
	h := health.NewServer()
	h.SetServingStatus(discoveryv1.Discovery_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, h)
	return gs, nil
}

// settlingCreds are the bootstrap listener's TLS credentials. At the end of its handshake a
// connection of a Connections listener settles: into a reserved slot when its caller presented
// an SVID that verifies against the current bundle (a proxy renewing), into a common slot
// otherwise, and it is closed when its kind of slot is full. Connections of other listeners
// pass through.
type settlingCreds struct {
	credentials.TransportCredentials
	verified func(chain []*x509.Certificate) spiffeid.ID
}

func (c settlingCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	limited, ok := raw.(*connlimit.Conn)
	if err != nil || !ok {
		return conn, info, err
	}
	var chain []*x509.Certificate
	if tlsInfo, ok := info.(credentials.TLSInfo); ok {
		chain = tlsInfo.State.PeerCertificates
	}
	if err := limited.Settle(!c.verified(chain).IsZero()); err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	return conn, info, nil
}

func (c settlingCreds) Clone() credentials.TransportCredentials {
	return settlingCreds{TransportCredentials: c.TransportCredentials.Clone(), verified: c.verified}
}

// unaryInterceptor lets only Bootstrap and the health check through.
func (s *Service) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if info.FullMethod != discoveryv1.Discovery_Bootstrap_FullMethodName && info.FullMethod != healthpb.Health_Check_FullMethodName {
		return nil, s.methodNotAllowed(info.FullMethod)
	}
	return handler(ctx, req)
}

// streamInterceptor refuses every streaming method: Stream belongs to the stream listener.
func (s *Service) streamInterceptor(_ any, _ grpc.ServerStream, info *grpc.StreamServerInfo, _ grpc.StreamHandler) error {
	return s.methodNotAllowed(info.FullMethod)
}

func (s *Service) methodNotAllowed(method string) error {
	s.metrics.rejected(ReasonMethodNotAllowed)
	s.log.Info("Refused method", "method", method, "reason", ReasonMethodNotAllowed)
	return status.Error(ReasonMethodNotAllowed.Code(), fmt.Sprintf("method %s is not served here", method))
}
