package listener

import (
	"io"
	"log"
	"net"
	"net/http"
	"sync"
)

// h2Server serves the connections of one HTTPS port that negotiated h2. fasthttp hands each
// such connection over after the handshake and closes it when the hand-over returns, so the
// hand-over waits until net/http reports the connection closed.
type h2Server struct {
	srv    *http.Server
	queue  chan net.Conn
	closed chan struct{}
	once   sync.Once
	addr   net.Addr
	mu     sync.Mutex
	done   map[net.Conn]chan struct{}
}

func newH2Server(handler http.Handler, addr net.Addr, opts *Options) *h2Server {
	s := &h2Server{queue: make(chan net.Conn), closed: make(chan struct{}), addr: addr, done: map[net.Conn]chan struct{}{}}
	var protocols http.Protocols
	protocols.SetHTTP2(true)
	s.srv = &http.Server{
		Handler:           handler,
		Protocols:         &protocols,
		ReadHeaderTimeout: opts.ReadTimeout,
		IdleTimeout:       opts.IdleTimeout,
		ConnState:         s.connState,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	go func() { _ = s.srv.Serve(s) }()
	return s
}

// serve is fasthttp's hand-over for a connection that negotiated h2. The reaper leaves it to
// net/http's own timeouts.
func (s *h2Server) serve(c net.Conn) error {
	if tc := tracked(c); tc != nil {
		tc.begin()
	}
	done := make(chan struct{})
	s.mu.Lock()
	s.done[c] = done
	s.mu.Unlock()
	select {
	case s.queue <- c:
	case <-s.closed:
		s.forget(c)
		return nil
	}
	<-done
	return nil
}

func (s *h2Server) connState(c net.Conn, state http.ConnState) {
	if state == http.StateClosed || state == http.StateHijacked {
		s.forget(c)
	}
}

func (s *h2Server) forget(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if done, ok := s.done[c]; ok {
		close(done)
		delete(s.done, c)
	}
}

// Accept, Close and Addr make the hand-over queue the net/http server's listener.
func (s *h2Server) Accept() (net.Conn, error) {
	select {
	case c := <-s.queue:
		return c, nil
	case <-s.closed:
		return nil, net.ErrClosed
	}
}

// Close stops the queue.
func (s *h2Server) Close() error {
	s.once.Do(func() { close(s.closed) })
	return nil
}

// Addr returns the port's address.
func (s *h2Server) Addr() net.Addr { return s.addr }
