package stream

import (
	"context"
	"net"
	"time"

	"coxswain.dev/coxswain/discovery/server/internal/connlimit"
)

// Defaults of the stream listener's connection caps.
const (
	// DefaultMaxConnections is how many connections the stream listener holds at once.
	DefaultMaxConnections = 4096
	// DefaultMaxConnectionsPerSource is how many of them one source address may hold: a proxy
	// pod needs one, a node of host-network proxies a few.
	DefaultMaxConnectionsPerSource = 64
	// DefaultBusyHandshakeTimeout bounds the handshake of a connection accepted while more than
	// half the connection cap is taken, in place of the handshake timeout.
	DefaultBusyHandshakeTimeout = 2 * time.Second
)

// Listener wraps lis, the stream listener's socket: at most MaxConnections connections are open
// at once and MaxConnectionsPerSource from one source address. A connection beyond is closed as
// soon as it is accepted, before any TLS work, and counted as refused (TooManyConnections,
// TooManyConnectionsFromSource). While more than half the cap is taken, a new connection must
// finish its handshake within BusyHandshakeTimeout. A connection that has held no subscribed
// stream for MaxConnectionIdle is closed: health checks and refused calls do not count. The
// server closes a connection of this
// listener whose send is stuck (see session.send). Serve the gRPC server on the result.
func (s *Server) Listener(lis net.Listener) net.Listener {
	return s.listeners.New(lis, connlimit.Config{
		Max: s.limits.connections, PerSource: s.limits.perSource,
		BusyHandshakeTimeout: s.limits.busyHandshakeTimeout, IdleTimeout: s.limits.maxConnectionIdle,
		Refused: s.refusedConnection,
	})
}

// refusedConnection counts and logs, unless logged too often lately, a connection closed at accept.
func (s *Server) refusedConnection(reason connlimit.Reason, source string) {
	s.metrics.denied.WithLabelValues(string(reason)).Inc()
	if ok, suppressed := s.quiet.Allow(string(reason)+" "+source, s.now()); ok {
		s.log.Info("Refused connection", "source", source, "reason", reason, "suppressed", suppressed)
	}
}

// connection returns the connection the stream of ctx rides, or nil when none of the server's
// listeners holds it (a gRPC server served without Listener).
func (s *Server) connection(ctx context.Context) *connlimit.Conn {
	return s.listeners.ConnOf(ctx)
}

// supersededOnSameConnection reports whether a session that superseded p rides p's connection.
func (s *Server) supersededOnSameConnection(p *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.sessions[p.key()]
	return next != nil && next != p && next.conn == p.conn
}
