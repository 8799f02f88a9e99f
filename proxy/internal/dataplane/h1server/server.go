package h1server

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
)

// Options configure a Server. Zero values take the defaults.
type Options struct {
	// HeaderReadTimeout bounds reading a request head, from accept for a connection's first
	// request and from the head's first byte for the others; 10s when zero.
	HeaderReadTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that starts no request for this long; 120s
	// when zero.
	IdleTimeout time.Duration
	// Limits bound the heads the codec accepts.
	Limits http1.Limits
	// ConnContext, when set, returns the context of a new connection's requests.
	ConnContext func(ctx context.Context, c net.Conn) context.Context
	// H2C, when set, takes a plaintext connection whose first bytes are the HTTP/2 client
	// preface (prior knowledge), with the bytes already read replayed by its first reads.
	H2C func(c net.Conn)
	// Refused, when set, is called for every head the codec refused, before the refusal is
	// written.
	Refused func(Refusal)
	// Log receives handler panics other than http.ErrAbortHandler.
	Log logr.Logger
	// ParkAfter, when set, hands a plaintext keep-alive connection idle this long to the idle
	// poller: its goroutine returns, and a new one serves the connection when bytes arrive
	// (Linux only). DefaultParkAfter is the listeners'.
	ParkAfter time.Duration
}

// Refusal is a request head the codec refused: why, the status it is answered with, and the
// connection it came on.
type Refusal struct {
	Reason     string
	Status     int
	RemoteAddr string
	// TLS is the connection's TLS state, nil for plaintext.
	TLS *tls.ConnectionState
}

// Defaults of Options.
const (
	DefaultHeaderReadTimeout = 10 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	DefaultParkAfter         = time.Second
)

// ErrServerClosed is returned by ServeConn once the server shut down.
var ErrServerClosed = errors.New("h1server: server closed")

// Server serves HTTP/1.1 connections handed to it by ServeConn.
type Server struct {
	handler http.Handler
	opts    Options
	// readers holds 4 KiB read buffers, heads the buffers a head too long for one grows to,
	// writers the response write buffers.
	readers, heads, writers sync.Pool
	headSize                int
	// joined holds the buffers a write that is not one writev joins its parts in.
	joined sync.Pool

	mu       sync.Mutex
	conns    map[*conn]struct{}
	shutdown atomic.Bool

	pollMu sync.Mutex
	poll   *poller
	noPoll bool
}

// readerSize is the read buffer of a connection with bytes in flight.
const (
	readerSize = 4 << 10
	writerSize = 4 << 10
)

// New returns a server that hands requests to h.
func New(h http.Handler, opts Options) *Server {
	if opts.HeaderReadTimeout == 0 {
		opts.HeaderReadTimeout = DefaultHeaderReadTimeout
	}
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.Limits.MaxHeaderBytes == 0 {
		opts.Limits.MaxHeaderBytes = http1.DefaultMaxHeaderBytes
	}
	if opts.Limits.MaxHeaderCount == 0 {
		opts.Limits.MaxHeaderCount = http1.DefaultMaxHeaderCount
	}
	if opts.Limits.MaxRequestLine == 0 {
		opts.Limits.MaxRequestLine = http1.DefaultMaxRequestLine
	}
	if opts.Refused == nil {
		opts.Refused = func(Refusal) {}
	}
	s := &Server{handler: h, opts: opts, conns: map[*conn]struct{}{}}
	s.headSize = max(opts.Limits.MaxHeaderBytes, readerSize)
	s.readers.New = func() any { return bufio.NewReaderSize(nil, readerSize) }
	s.heads.New = func() any { return bufio.NewReaderSize(nil, s.headSize) }
	s.writers.New = func() any {
		b := make([]byte, 0, writerSize)
		return &b
	}
	s.joined.New = func() any {
		b := make([]byte, 0, maxJoined)
		return &b
	}
	return s
}

// ServeConn serves c until it closes, its client goes away or the server shuts down, and
// closes it, unless a handler hijacked it or it went to H2C. A TLS connection's handshake is
// the caller's, done before. It returns ErrServerClosed when the server already shut down.
// With ParkAfter it may return while c is parked, still served by the server.
func (s *Server) ServeConn(c net.Conn) error {
	cn := newConn(s, c)
	if !s.track(cn) {
		_ = c.Close()
		return ErrServerClosed
	}
	s.run(cn)
	return nil
}

// run serves c on the calling goroutine until it ends or parks.
func (s *Server) run(c *conn) {
	if !c.serve() {
		s.untrack(c)
	}
}

// poller returns the idle poller, started on first use; nil when connections do not park.
func (s *Server) poller() *poller {
	s.pollMu.Lock()
	defer s.pollMu.Unlock()
	if s.poll == nil && !s.noPoll && !s.shutdown.Load() {
		p, err := newPoller(s)
		if err != nil {
			s.noPoll = true
			return nil
		}
		s.poll = p
	}
	return s.poll
}

// stopPoller ends the idle poller's goroutine.
func (s *Server) stopPoller() {
	s.pollMu.Lock()
	p := s.poll
	s.noPoll = true
	s.pollMu.Unlock()
	if p != nil {
		p.stop()
	}
}

func (s *Server) track(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown.Load() {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// Shutdown stops taking connections, closes the idle ones, and waits for those serving a
// request to finish theirs (each closes after its response) until ctx ends, when it closes
// them.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdown.Store(true)
	wait := time.Millisecond
	for {
		if s.closeIdle() == 0 {
			s.stopPoller()
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			s.Close()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// closeIdle closes the idle connections and returns how many are left.
func (s *Server) closeIdle() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.closeIfIdle() {
			delete(s.conns, c)
		}
	}
	return len(s.conns)
}

// Close closes every connection at once.
func (s *Server) Close() {
	s.shutdown.Store(true)
	s.mu.Lock()
	for c := range s.conns {
		if c.closeIfParked() {
			delete(s.conns, c)
			continue
		}
		_ = c.nc.Close()
	}
	s.mu.Unlock()
	s.stopPoller()
}

// Open returns the number of connections served now.
func (s *Server) Open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

func (s *Server) getReader(src *source) *bufio.Reader {
	br := s.readers.Get().(*bufio.Reader)
	br.Reset(src)
	return br
}

// putReader gives br back to the pool it came from.
func (s *Server) putReader(br *bufio.Reader) {
	br.Reset(nil)
	if br.Size() == readerSize {
		s.readers.Put(br)
		return
	}
	s.heads.Put(br)
}

// tlsState returns the connection state of a TLS connection, nil for any other.
func tlsState(c net.Conn) *tls.ConnectionState {
	tc, ok := c.(interface{ ConnectionState() tls.ConnectionState })
	if !ok {
		return nil
	}
	st := tc.ConnectionState()
	return &st
}
