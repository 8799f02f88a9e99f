package listener

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"

	"coxswain.dev/coxswain/proxy/internal/dataplane/forward"
	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
)

// server serves one bound port.
type server struct {
	port     uint32
	protocol router.Protocol
	addr     net.Addr
	http     *http.Server
	native   *native
	pass     *passthrough
	udp      *udpServer
	ln       *limitListener
	served   chan error
}

func (m *Manager) newServer(port uint32, protocol router.Protocol) (*server, error) {
	addr := m.opts.Address(port)
	if protocol == router.UDP {
		u, err := m.newUDP(port, addr)
		if err != nil {
			return nil, fmt.Errorf("bind UDP port %d on %s: %w", port, addr, err)
		}
		s := &server{port: port, protocol: protocol, addr: u.conn.LocalAddr(), udp: u, served: make(chan error, 1)}
		go func() { s.served <- u.serve() }()
		return s, nil
	}
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bind port %d on %s: %w", port, addr, err)
	}
	l := &forward.Listener{Port: port, Scheme: "http"}
	if protocol == router.HTTPS {
		l.Scheme = "https"
	}
	s := &server{port: port, protocol: protocol, addr: ln.Addr(), served: make(chan error, 1)}
	s.ln = &limitListener{
		Listener: ln, open: &m.open, max: int64(m.opts.MaxConnections), refused: m.connectionRefused,
		clients: m.clients, clientRefused: m.opts.ClientConnectionRefused, overload: m.opts.Overload,
	}
	if tlsByName(protocol) || protocol == router.TCP {
		s.pass = m.newPassthrough(port, s.ln, tlsByName(protocol))
		go func() { s.served <- s.pass.serve() }()
		return s, nil
	}
	if m.opts.Engine == http1.EngineNative {
		s.native = m.newNative(l, protocol, s.ln)
		go func() { s.served <- s.native.serve() }()
		return s, nil
	}
	s.http = m.httpServer(l, protocol)
	go func() {
		if protocol == router.HTTPS {
			s.served <- s.http.ServeTLS(s.ln, "", "")
			return
		}
		s.served <- s.http.Serve(s.ln)
	}()
	return s, nil
}

// httpServer returns the server of one port. HTTP/1.1 and HTTP/2 share the limits: the header
// size (for HTTP/2 also the advertised header list size), the header-read and idle timeouts;
// the per-request body and send deadlines are the handler's.
func (m *Manager) httpServer(l *forward.Listener, protocol router.Protocol) *http.Server {
	o := &m.opts
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	if protocol == router.HTTPS {
		protocols.SetHTTP2(true)
	} else {
		protocols.SetUnencryptedHTTP2(true)
	}
	srv := &http.Server{
		Handler:           m.handler.HTTP(l),
		Protocols:         &protocols,
		ReadHeaderTimeout: o.HeaderReadTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    o.MaxHeaderBytes,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams:          o.HTTP2MaxConcurrentStreams,
			MaxReceiveBufferPerStream:     int(o.HTTP2StreamWindow),
			MaxReceiveBufferPerConnection: int(o.HTTP2ConnectionWindow),
			// A connection whose peer takes no bytes for this long is closed.
			WriteByteTimeout: o.SendTimeout,
		},
		ErrorLog:    log.New(io.Discard, "", 0),
		ConnContext: forward.WithConnection,
	}
	if protocol == router.HTTPS {
		srv.TLSConfig = tlsConfig(m.handler, l.Port)
	}
	return srv
}

// shutdown stops accepting, tells HTTP/2 clients to go away, closes idle keep-alive
// connections and waits for requests in flight until ctx ends, when it closes the rest.
func (s *server) shutdown(ctx context.Context) error {
	if s.native != nil || s.pass != nil || s.udp != nil {
		return s.shutdownNative(ctx)
	}
	var errs []error
	if err := s.http.Shutdown(ctx); err != nil {
		errs = append(errs, err)
		_ = s.http.Close()
	}
	select {
	case err := <-s.served:
		if !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	case <-ctx.Done():
		errs = append(errs, ctx.Err())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("shut down port %d: %w", s.port, err)
	}
	return nil
}

// shutdownNative is shutdown for the native engine and for TLS passthrough.
func (s *server) shutdownNative(ctx context.Context) error {
	var errs []error
	switch {
	case s.udp != nil:
		errs = append(errs, s.udp.shutdown(ctx))
	case s.pass != nil:
		errs = append(errs, s.pass.shutdown(ctx))
	default:
		errs = append(errs, s.native.shutdown(ctx))
	}
	select {
	case err := <-s.served:
		if !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	case <-ctx.Done():
		errs = append(errs, ctx.Err())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("shut down port %d: %w", s.port, err)
	}
	return nil
}

// limitListener bounds the open connections of every port of a manager: a connection
// accepted beyond the bound, beyond its client address's share of it, or while the proxy is
// overloaded, is closed at once and counted, so that a flood of connections cannot exhaust the
// proxy's descriptors or memory, one client cannot take every place, and the established ones
// stay served. A refusal is counted before the connection is closed, so that whoever sees the
// close (the client, a test, an operator reading the metric after a refused dial) sees the
// count too.
type limitListener struct {
	net.Listener
	open          *atomic.Int64
	max           int64
	refused       func()
	clients       *clientConns
	clientRefused func()
	overload      *Overload
	// closed makes Close idempotent: StopAccepting closes the socket before the server's own
	// shutdown does, and net/http's Shutdown would take a second Close's error for a failure
	// (and close every connection at once).
	closed atomic.Bool
}

// Close closes the socket the first time; later calls return nil.
func (l *limitListener) Close() error {
	if !l.closed.CompareAndSwap(false, true) {
		return nil
	}
	return l.Listener.Close()
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.overload.Overloaded() {
			l.overload.refused()
			_ = c.Close()
			continue
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.refused()
			_ = c.Close()
			continue
		}
		client := clientAddr(c)
		if !l.clients.take(client) {
			l.open.Add(-1)
			l.clientRefused()
			_ = c.Close()
			continue
		}
		return &countedConn{Conn: c, open: l.open, clients: l.clients, client: client}, nil
	}
}

// countedConn gives its places back when closed.
type countedConn struct {
	net.Conn
	open    *atomic.Int64
	clients *clientConns
	client  netip.Addr
	closed  atomic.Bool
}

func (c *countedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.open.Add(-1)
		c.clients.give(c.client)
	}
	return c.Conn.Close()
}

// NetConn returns the connection under c, for the native server's system calls.
func (c *countedConn) NetConn() net.Conn { return c.Conn }

// CloseWrite half-closes the connection, as a TCP connection can.
func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
