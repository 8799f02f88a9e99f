package stream

import (
	"crypto/tls"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
)

const (
	// maxConcurrentStreams bounds the streams one connection may open; a proxy needs one.
	maxConcurrentStreams = 4
	// connectionAgeGrace is how long a connection past its age keeps its streams before it closes.
	connectionAgeGrace = 30 * time.Second
	// streamWindow is each stream's receive window: room for two of the largest client messages.
	// A fixed window turns off gRPC's bandwidth estimator, which answered every ACK with a window
	// update and a ping (one more write and one more read on every stream for every snapshot),
	// and holds what a client can send ahead of the server's reading to the window.
	streamWindow = 2 * discoveryv1.MaxClientMessageBytes
)

// NewGRPCServer returns the gRPC server of the stream listener with s registered behind its
// interceptors: TLS 1.3 with tlsConfig (tlsconfig.MTLSServer), which must demand and verify a
// client certificate, a handshake deadline, an idle limit, keepalive enforcement, message
// size caps, fixed receive windows, no read buffer over TLS's own, and a maximum connection age a
// little past the session lifetime. The gRPC health service answers there too, to mTLS peers only (service "" and
// the Discovery service; NOT_SERVING after Shutdown). There is no way to build it
// without TLS.
func (s *Server) NewGRPCServer(tlsConfig *tls.Config, opts ...grpc.ServerOption) (*grpc.Server, error) {
	cfg, err := mutualTLS(tlsConfig)
	if err != nil {
		return nil, err
	}
	base := []grpc.ServerOption{
		grpc.Creds(credentials.NewTLS(cfg)),
		// Passes the snapshot frames through, encoded once for every stream (see frame).
		grpc.ForceServerCodecV2(newCodec()),
		// Stop and GracefulStop return only after every handler has: nothing outlives a stop.
		grpc.WaitForHandlers(true),
		grpc.ChainUnaryInterceptor(s.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(s.StreamInterceptor()),
		grpc.UnknownServiceHandler(UnknownServiceHandler),
		grpc.MaxRecvMsgSize(discoveryv1.MaxClientMessageBytes),
		grpc.MaxSendMsgSize(discoveryv1.MaxServerMessageBytes),
		grpc.MaxConcurrentStreams(maxConcurrentStreams),
		grpc.StaticStreamWindowSize(streamWindow),
		grpc.StaticConnWindowSize(maxConcurrentStreams * streamWindow),
		// No read buffer of gRPC's own over the TLS connection, which buffers records already:
		// its 32 KiB per connection were half the heap of an idle stream, and what a proxy sends
		// (Subscribe, ACK, NACK) is small.
		grpc.ReadBufferSize(0),
		grpc.ConnectionTimeout(s.limits.handshakeTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime: discoveryv1.KeepaliveMinInterval, PermitWithoutStream: false,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: s.limits.maxConnectionIdle,
			// A backstop behind the session's own end: no stream outlives the session lifetime,
			// so no connection needs to (gRPC moves the age by up to 10% either way).
			MaxConnectionAge: s.peers.maxLifetime + s.peers.maxLifetime/9, MaxConnectionAgeGrace: connectionAgeGrace,
			Time: discoveryv1.KeepaliveInterval, Timeout: discoveryv1.KeepaliveTimeout,
		}),
	}
	gs := grpc.NewServer(append(base, opts...)...)
	discoveryv1.RegisterDiscoveryServer(gs, s)
	healthpb.RegisterHealthServer(gs, s.health)
	return gs, nil
}

// mutualTLS returns a copy of cfg held to TLS 1.3, refusing a config that would let a peer in
// without a verified client certificate.
func mutualTLS(cfg *tls.Config) (*tls.Config, error) {
	if cfg == nil {
		return nil, errors.New("stream: a TLS config is required")
	}
	switch {
	case cfg.ClientAuth == tls.RequireAndVerifyClientCert:
	case cfg.ClientAuth == tls.RequireAnyClientCert && (cfg.VerifyConnection != nil || cfg.VerifyPeerCertificate != nil):
	default:
		return nil, errors.New("stream: the TLS config must require and verify client certificates")
	}
	cfg = cfg.Clone()
	cfg.MinVersion = tls.VersionTLS13
	return cfg, nil
}

func newHealth() *health.Server {
	h := health.NewServer()
	h.SetServingStatus(discoveryv1.Discovery_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	return h
}
