package upstream

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"
)

// guarded is Go's Transport speaking HTTP/1.1 to one endpoint, with what it lacks to reuse a
// connection as the native engine does (h1client): its connections (guardedConn) end the
// exchange with an end of file after an answer without a body by method or status, so that
// the Transport closes them; a connection back from an answer rests for the quarantine
// before another request is written on it, while the Transport's reader watches it; and one
// whose backend answered before the request was written whole carries no other request.
type guarded struct {
	*http.Transport
	quarantine time.Duration
}

// newGuarded returns t with its connections guarded, over TLS with cfg (HTTP/1.1 alone)
// when cfg is not nil.
func newGuarded(t *http.Transport, dialer *net.Dialer, addr string, cfg *tls.Config, handshake, quarantine time.Duration) *guarded {
	dial := func(ctx context.Context) (net.Conn, error) {
		raw, err := dialer.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return &guardedConn{Conn: raw}, nil
	}
	if cfg == nil {
		t.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) }
		return &guarded{Transport: t, quarantine: quarantine}
	}
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"http/1.1"}
	t.DialTLSContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		raw, err := dialer.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		tc := tls.Client(raw, cfg)
		hctx, cancel := context.WithTimeout(ctx, handshake)
		defer cancel()
		if err := tc.HandshakeContext(hctx); err != nil {
			_ = raw.Close()
			return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
		}
		return &guardedConn{Conn: tc}, nil
	}
	return &guarded{Transport: t, quarantine: quarantine}
}

// RoundTrip sends req through the Transport, watching the connection it gets.
func (g *guarded) RoundTrip(req *http.Request) (*http.Response, error) {
	var c *guardedConn
	head := req.Method == http.MethodHead
	bodiless := req.Body == nil || req.Body == http.NoBody
	replayable := bodiless || req.GetBody != nil
	trace := &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			gc, ok := info.Conn.(*guardedConn)
			if !ok {
				return
			}
			c = gc
			c.begin(req.Context(), head, bodiless, replayable, info.Reused, g.quarantine)
		},
		WroteRequest: func(httptrace.WroteRequestInfo) {
			if c != nil {
				c.wrote()
			}
		},
	}
	return g.Transport.RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
}

// guardedConn is a connection of a guarded Transport. It follows the answer to the request
// it carries in the bytes the Transport reads (answer.go): its heads, and after an answer
// that came before the request was written whole, its body.
type guardedConn struct {
	net.Conn
	mu sync.Mutex
	// lastRead is when a read last returned bytes.
	lastRead time.Time
	// retired says the connection must carry no other request that can go on another.
	retired bool
	answer
}

// begin readies c for a request. A retired connection is closed when the request can be sent
// again (the Transport then sends it on another, as for a connection closed before it wrote
// anything); a request that cannot goes on it. A reused connection that read bytes less than
// the quarantine ago is held for the rest of it, while the Transport's reader would see bytes
// that come meanwhile and close it.
func (c *guardedConn) begin(ctx context.Context, head, bodiless, replayable, reused bool, quarantine time.Duration) {
	c.mu.Lock()
	if c.retired && replayable {
		c.mu.Unlock()
		_ = c.Close()
		return
	}
	wait := quarantine - time.Since(c.lastRead)
	c.answer.begin(head, bodiless)
	c.mu.Unlock()
	if !reused || wait <= 0 {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// wrote records that the request was written whole.
func (c *guardedConn) wrote() {
	c.mu.Lock()
	c.sent = true
	c.mu.Unlock()
}

// Read reads from the connection. The read that ends the final head of an answer without a
// body (to HEAD, or a 204 or 304), or the body of an answer that came before the request was
// written whole, ends there with io.EOF, so that the Transport closes the connection rather
// than pool it.
func (c *guardedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n == 0 {
		return n, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastRead = time.Now()
	end, lost := c.scan(p[:n])
	if lost {
		// An early answer whose body could not be followed: no request that can go on
		// another connection goes on this one.
		c.retired = true
	}
	if end >= 0 {
		return end, io.EOF
	}
	return n, err
}

// ReadFrom sends what r holds through the connection under c, by its own ReadFrom where it
// has one (sendfile or splice from a file or socket), as the Transport's writer would.
func (c *guardedConn) ReadFrom(r io.Reader) (int64, error) { return io.Copy(c.Conn, r) }

// CloseWrite half-closes the connection under c, as a tunnel after a 101 does through the
// Transport's body.
func (c *guardedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}
