package stream

import (
	"context"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
)

// UnaryInterceptor refuses every unary call but the health check (the handshake already
// required a verified client certificate): Bootstrap belongs to the bootstrap listener.
func (s *Server) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if info.FullMethod == healthpb.Health_Check_FullMethodName {
			return handler(ctx, req)
		}
		return nil, s.refuse(ctx, deny(ReasonMethodNotAllowed, "method %s is not served here", info.FullMethod))
	}
}

// StreamInterceptor is the authorization choke point of the stream listener: only the Stream
// method passes, and only with a peer whose certificate verifies against the current bundle and
// carries one ServiceAccount SPIFFE ID of the trust domain. The identity travels to the handler
// in the stream context. Unknown methods, including those of unknown services, are refused.
func (s *Server) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		if info.FullMethod != discoveryv1.Discovery_Stream_FullMethodName {
			return s.refuse(ctx, deny(ReasonMethodNotAllowed, "method %s is not served here", info.FullMethod))
		}
		if n := s.streams.Add(1); n > int64(s.limits.streams) {
			s.streams.Add(-1)
			return s.refuse(ctx, deny(ReasonTooManyStreams, "the listener holds %d streams", s.limits.streams))
		}
		defer s.streams.Add(-1)
		id, err := s.peers.identity(ctx)
		if err != nil {
			return s.refuse(ctx, deny(ReasonNoPeerIdentity, "%v", err))
		}
		return handler(srv, &identifiedStream{ServerStream: ss, ctx: withIdentity(ctx, id)})
	}
}

// identifiedStream carries the verified identity in its context.
type identifiedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *identifiedStream) Context() context.Context { return s.ctx }

// UnknownServiceHandler answers methods no service registered; the interceptor refuses them
// first, so this only runs if it is left out of the chain.
func UnknownServiceHandler(any, grpc.ServerStream) error {
	return status.Error(ReasonMethodNotAllowed.Code(), "unknown method")
}
