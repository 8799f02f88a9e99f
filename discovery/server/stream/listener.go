package stream

import (
	"net"
	"sync"
)

// DefaultMaxConnections is how many connections the stream listener holds at once.
const DefaultMaxConnections = 4096

// Listener wraps lis, the stream listener's socket, so that at most MaxConnections connections
// are open at once: a connection beyond is closed as soon as it is accepted, before any TLS
// work, and counted as refused (TooManyConnections). Serve the gRPC server on the result.
func (s *Server) Listener(lis net.Listener) net.Listener {
	return &limitListener{Listener: lis, slots: make(chan struct{}, s.limits.connections), srv: s}
}

type limitListener struct {
	net.Listener
	slots chan struct{}
	srv   *Server
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &limitConn{Conn: conn, release: func() { <-l.slots }}, nil
		default:
			_ = conn.Close()
			l.srv.metrics.denied.WithLabelValues(string(ReasonTooManyConnections)).Inc()
		}
	}
}

// limitConn gives its slot back once, when closed.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
