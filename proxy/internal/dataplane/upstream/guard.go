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
	trace := &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			gc, ok := info.Conn.(*guardedConn)
			if !ok {
				return
			}
			c = gc
			c.begin(req.Context(), head, info.Reused, g.quarantine)
		},
		WroteRequest: func(httptrace.WroteRequestInfo) {
			if c != nil {
				c.wrote()
			}
		},
	}
	return g.Transport.RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
}

// guardedConn is a connection of a guarded Transport. It reads the status lines of the
// answers to the request it carries, from the bytes the Transport reads, up to the end of
// the final head.
type guardedConn struct {
	net.Conn
	mu sync.Mutex
	// lastRead is when a read last returned bytes.
	lastRead time.Time
	// active says the final head of the request's answer is still to come.
	active bool
	// head says the request is a HEAD; sent that it was written whole.
	head, sent bool
	// retired says the connection must carry no other request.
	retired bool
	// line holds the first bytes of the head being read, up to its status code; n counts them.
	line [len("HTTP/1.1 200")]byte
	n    int
	// eol is the end of line state: 1 after a line feed, 2 after a line feed and a carriage
	// return (a blank line starting), 0 otherwise.
	eol int
}

// begin readies c for a request: a connection that was retired is closed (the request goes
// on another, as the Transport does for a connection closed before it wrote anything), and a
// reused one that read bytes less than the quarantine ago is held until the quarantine is
// over, while the Transport's reader would see bytes that come meanwhile and close it.
func (c *guardedConn) begin(ctx context.Context, head, reused bool, quarantine time.Duration) {
	c.mu.Lock()
	if c.retired {
		c.mu.Unlock()
		_ = c.Close()
		return
	}
	wait := quarantine - time.Since(c.lastRead)
	c.active, c.head, c.sent, c.n, c.eol = true, head, false, 0, 0
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

// Read reads from the connection; the read that ends the final head of an answer without a
// body (to HEAD, or a 204 or 304) ends there with io.EOF, so that the Transport closes the
// connection rather than pool it.
func (c *guardedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n == 0 {
		return n, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastRead = time.Now()
	if !c.active {
		return n, err
	}
	if end, bodiless := c.scan(p[:n]); end >= 0 && bodiless {
		return end, io.EOF
	}
	return n, err
}

// CloseWrite half-closes the connection under c, as a tunnel after a 101 does through the
// Transport's body.
func (c *guardedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// ReadFrom sends what r holds through the connection under c, by its own ReadFrom where it
// has one (sendfile or splice from a file or socket), as the Transport's writer would.
func (c *guardedConn) ReadFrom(r io.Reader) (int64, error) { return io.Copy(c.Conn, r) }

// scan follows the heads in b; it returns the length of b up to the end of the final head,
// -1 if b does not end it, and whether the answer has no body.
func (c *guardedConn) scan(b []byte) (int, bool) {
	for i, ch := range b {
		if c.n < len(c.line) {
			c.line[c.n] = ch
			c.n++
		}
		switch {
		case ch == '\n' && c.eol > 0:
			if bodiless, final := c.headEnd(); final {
				return i + 1, bodiless
			}
		case ch == '\n':
			c.eol = 1
		case ch == '\r' && c.eol == 1:
			c.eol = 2
		default:
			c.eol = 0
		}
	}
	return -1, false
}

// headEnd ends a head: an informational one (1xx but 101) is followed by another, a final
// one ends the watch. It reports whether the head was final and whether its answer has no
// body; a final head that came before the request was written whole retires the connection.
func (c *guardedConn) headEnd() (bodiless, final bool) {
	status := 0
	if c.n == len(c.line) {
		for _, d := range c.line[len("HTTP/1.1 "):] {
			status = status*10 + int(d-'0')
		}
	}
	if status >= 100 && status < 200 && status != http.StatusSwitchingProtocols {
		c.n, c.eol = 0, 0
		return false, false
	}
	c.active = false
	if !c.sent {
		c.retired = true
	}
	return c.head || status == http.StatusNoContent || status == http.StatusNotModified, true
}
