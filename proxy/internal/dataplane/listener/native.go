package listener

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"coxswain.dev/coxswain/proxy/internal/dataplane/forward"
	"coxswain.dev/coxswain/proxy/internal/dataplane/h1server"
	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
)

// native serves one port with the native HTTP/1.1 engine: every accepted connection gets a
// goroutine that does the TLS handshake (HTTPS) under the header read timeout, then hands
// HTTP/2 (ALPN h2, or a plaintext connection opening with the HTTP/2 preface) to Go's HTTP/2
// server and serves the rest with h1server.
type native struct {
	ln       *limitListener
	tls      *tls.Config
	timeout  time.Duration
	h1       *h1server.Server
	h2       *http.Server
	h2ln     *chanListener
	h2served chan error
	conns    sync.WaitGroup
	// accepting is closed when serve returns: no connection is added to conns after it, so
	// conns may be waited for.
	accepting chan struct{}

	mu          sync.Mutex
	handshaking map[*tls.Conn]struct{}
	stopped     bool
}

func (m *Manager) newNative(l *forward.Listener, protocol router.Protocol, ln *limitListener) *native {
	o := &m.opts
	n := &native{
		ln: ln, timeout: o.HeaderReadTimeout, h2served: make(chan error, 1), accepting: make(chan struct{}),
		h2ln: newChanListener(ln.Addr()), handshaking: map[*tls.Conn]struct{}{},
	}
	// The HTTP/2 server gets connections handshaken already: it needs no TLS config of its
	// own to serve those that negotiated h2.
	n.h2 = m.httpServer(l, protocol)
	n.h2.TLSConfig = nil
	opts := h1server.Options{
		HeaderReadTimeout: o.HeaderReadTimeout, IdleTimeout: o.IdleTimeout,
		Limits:      http1.Limits{MaxHeaderBytes: o.MaxHeaderBytes, MaxHeaderCount: o.MaxHeaderCount},
		ConnContext: forward.WithConnection, Log: m.log,
		Refused: func(r h1server.Refusal) {
			m.handler.RefusedHead(headReason(r.Reason), r.Status, r.RemoteAddr, r.TLS)
		},
		ParkAfter: h1server.DefaultParkAfter,
	}
	if protocol == router.HTTPS {
		n.tls = tlsConfig(m.handler, l.Port)
	} else {
		opts.H2C = n.h2ln.hand
	}
	n.h1 = h1server.New(m.handler.HTTP(l), opts)
	go func() { n.h2served <- n.h2.Serve(n.h2ln) }()
	return n
}

// headReason is the reason the access log and the refusal metric give a head the codec refused:
// the codec's own, but for the two limits the handler enforces too, which get the handler's
// reasons, so that a breached --max-header-count or --max-header-bytes reads alike whichever
// engine refused it.
func headReason(codec string) string {
	switch codec {
	case http1.ReasonTooManyFields:
		return forward.ReasonHeaderCount
	case http1.ReasonHeadTooLarge:
		return forward.ReasonHeaderBytes
	}
	return codec
}

// serve accepts connections until the listener closes.
func (n *native) serve() error {
	defer close(n.accepting)
	for {
		c, err := n.ln.Accept()
		if err != nil {
			return err
		}
		n.conns.Go(func() { n.conn(c) })
	}
}

// conn serves one accepted connection.
func (n *native) conn(c net.Conn) {
	if n.tls == nil {
		_ = n.h1.ServeConn(c)
		return
	}
	tc := tls.Server(c, n.tls)
	if !n.startHandshake(tc) {
		_ = c.Close()
		return
	}
	_ = tc.SetDeadline(time.Now().Add(n.timeout))
	err := tc.HandshakeContext(context.Background())
	n.endHandshake(tc)
	if err != nil {
		handshakeFailed(err)
		_ = tc.Close()
		return
	}
	_ = tc.SetDeadline(time.Time{})
	if tc.ConnectionState().NegotiatedProtocol == "h2" {
		n.h2ln.hand(tc)
		return
	}
	_ = n.h1.ServeConn(tc)
}

// handshakeFailed answers a plaintext HTTP request sent to the HTTPS port as net/http does.
func handshakeFailed(err error) {
	var re tls.RecordHeaderError
	if errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader) {
		_, _ = io.WriteString(re.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
		_ = re.Conn.Close()
	}
}

func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return true
	}
	return false
}

func (n *native) startHandshake(tc *tls.Conn) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return false
	}
	n.handshaking[tc] = struct{}{}
	return true
}

func (n *native) endHandshake(tc *tls.Conn) {
	n.mu.Lock()
	delete(n.handshaking, tc)
	n.mu.Unlock()
}

// shutdown stops accepting, closes the connections still in their handshake, tells HTTP/2
// clients to go away, closes idle HTTP/1.1 connections and waits for requests in flight
// until ctx ends, when it closes the rest.
func (n *native) shutdown(ctx context.Context) error {
	var errs []error
	if err := n.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		errs = append(errs, err)
	}
	n.mu.Lock()
	n.stopped = true
	for tc := range n.handshaking {
		_ = tc.NetConn().Close()
	}
	n.mu.Unlock()
	var wg sync.WaitGroup
	var h2err, h1err error
	wg.Go(func() {
		if h2err = n.h2.Shutdown(ctx); h2err != nil {
			_ = n.h2.Close()
		}
	})
	wg.Go(func() { h1err = n.h1.Shutdown(ctx) })
	wg.Wait()
	errs = append(errs, h2err, h1err)
	if err := <-n.h2served; !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
		errs = append(errs, err)
	}
	done := make(chan struct{})
	go func() {
		<-n.accepting
		n.conns.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		n.h1.Close()
		errs = append(errs, fmt.Errorf("connections: %w", ctx.Err()))
	}
	return errors.Join(errs...)
}

// chanListener is the listener of the HTTP/2 server: the connections handed to it.
type chanListener struct {
	addr net.Addr
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

// hand gives c to the server, or closes it once the listener closed.
func (l *chanListener) hand(c net.Conn) {
	select {
	case l.ch <- c:
	case <-l.done:
		_ = c.Close()
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }
