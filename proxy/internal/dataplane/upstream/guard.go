package upstream

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
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
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	trace := &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			gc, ok := info.Conn.(*guardedConn)
			if !ok {
				return
			}
			c = gc
			c.begin(req.Context(), head, replayable, info.Reused, g.quarantine)
		},
		WroteRequest: func(httptrace.WroteRequestInfo) {
			if c != nil {
				c.wrote()
			}
		},
	}
	return g.Transport.RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
}

// guardedConn is a connection of a guarded Transport. It follows the heads of the answer to
// the request it carries, in the bytes the Transport reads, up to the end of the final head,
// and then, after an answer that came early, its body of known length.
type guardedConn struct {
	net.Conn
	mu sync.Mutex
	// lastRead is when a read last returned bytes.
	lastRead time.Time
	// writes counts the writes done; sentAt is its count when the request was written whole,
	// headAt when the final head ended.
	writes, sentAt, headAt int
	// active says the final head of the request's answer is still to come.
	active bool
	// head says the request is a HEAD; sent that it was written whole.
	head, sent bool
	// early says the final head came before the request was written whole; retired that the
	// connection must carry no other request.
	early, retired bool
	// remain is what is left of the body of an early answer, after which the Transport reads
	// an end of file; 0 when not counting.
	remain int64
	// line holds the first bytes of the line being read, n counts them, and lines counts the
	// head's lines so far.
	line     [40]byte
	n, lines int
	// eol is 1 after a line feed, 2 after a line feed and a carriage return, 0 otherwise.
	eol int
	// status, length and chunked are what the head's lines said so far; length is -1 when no
	// Content-Length came.
	status  int
	length  int64
	chunked bool
}

// begin readies c for a request. A retired connection is closed when the request can be sent
// again (the Transport then sends it on another, as for a connection closed before it wrote
// anything); a request that cannot goes on it. A reused connection that read bytes less than
// the quarantine ago is held for the rest of it, while the Transport's reader would see bytes
// that come meanwhile and close it.
func (c *guardedConn) begin(ctx context.Context, head, replayable, reused bool, quarantine time.Duration) {
	c.mu.Lock()
	if c.retired && replayable {
		c.mu.Unlock()
		_ = c.Close()
		return
	}
	wait := quarantine - time.Since(c.lastRead)
	c.active, c.head, c.sent, c.early, c.remain = true, head, false, false, 0
	c.writes, c.sentAt, c.headAt = 0, 0, 0
	c.newHead()
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

// newHead readies c for a response head.
func (c *guardedConn) newHead() {
	c.n, c.lines, c.eol, c.status, c.length, c.chunked = 0, 0, 1, 0, -1, false
}

// wrote records that the request was written whole; an early answer that came before its
// last write retires the connection.
func (c *guardedConn) wrote() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent, c.sentAt = true, c.writes
	if c.early && c.headAt < c.sentAt {
		c.retired = true
	}
}

// Write writes to the connection, counting the writes.
func (c *guardedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.wrote1()
	return n, err
}

// ReadFrom sends what r holds through the connection under c, by its own ReadFrom where it
// has one (sendfile or splice from a file or socket), as the Transport's writer would.
func (c *guardedConn) ReadFrom(r io.Reader) (int64, error) {
	n, err := io.Copy(c.Conn, r)
	c.wrote1()
	return n, err
}

func (c *guardedConn) wrote1() {
	c.mu.Lock()
	c.writes++
	c.mu.Unlock()
}

// CloseWrite half-closes the connection under c, as a tunnel after a 101 does through the
// Transport's body.
func (c *guardedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// Read reads from the connection. The read that ends the final head of an answer without a
// body (to HEAD, or a 204 or 304), or the body of known length of an answer that came before
// the request was written whole, ends there with io.EOF, so that the Transport closes the
// connection rather than pool it.
func (c *guardedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n == 0 {
		return n, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastRead = time.Now()
	if end := c.scan(p[:n]); end >= 0 {
		return end, io.EOF
	}
	return n, err
}

// scan follows b; it returns the length of b up to where the Transport must read an end of
// file, -1 for nowhere.
func (c *guardedConn) scan(b []byte) int {
	for i := 0; i < len(b); i++ {
		if c.remain > 0 {
			if rest := int64(len(b) - i); rest < c.remain {
				c.remain -= rest
				return -1
			}
			end := i + int(c.remain) //nolint:gosec // at most len(b)
			c.remain = 0
			return end
		}
		if !c.active {
			return -1
		}
		ch := b[i]
		if c.n < len(c.line) {
			c.line[c.n] = ch
			c.n++
		}
		switch {
		case ch == '\n' && c.eol > 0 && c.lines > 0:
			if c.headEnd() {
				return i + 1
			}
		case ch == '\n':
			c.field()
			c.n, c.eol = 0, 1
		case ch == '\r' && c.eol == 1:
			c.eol = 2
		default:
			c.eol = 0
		}
	}
	return -1
}

// field reads the line just ended: the status line, or a field that frames the body.
func (c *guardedConn) field() {
	line := c.line[:c.n]
	c.lines++
	if c.lines == 1 {
		if len(line) >= len("HTTP/1.1 200") {
			for _, d := range line[len("HTTP/1.1 "):len("HTTP/1.1 200")] {
				c.status = c.status*10 + int(d-'0')
			}
		}
		return
	}
	name, value, ok := bytes.Cut(line, []byte(":"))
	switch {
	case !ok:
	case bytes.EqualFold(name, []byte("Transfer-Encoding")):
		c.chunked = true
	case bytes.EqualFold(name, []byte("Content-Length")):
		if n, err := strconv.ParseInt(string(bytes.TrimSpace(value)), 10, 64); err == nil && n >= 0 {
			c.length = n
		}
	}
}

// headEnd ends a head. An informational one (1xx but 101) is followed by another; a final one
// ends the watch, and it reports whether the Transport must read an end of file right after
// it: when the answer has no body, or an early answer's body is empty. The body of an early
// answer of known length is counted; an early answer of another length retires the
// connection once the request is written, if a write came after it (wrote).
func (c *guardedConn) headEnd() bool {
	if c.status >= 100 && c.status < 200 && c.status != http.StatusSwitchingProtocols {
		c.newHead()
		return false
	}
	c.active = false
	if c.head || c.status == http.StatusNoContent || c.status == http.StatusNotModified {
		return true
	}
	if c.sent || c.status == http.StatusSwitchingProtocols {
		return false
	}
	c.early, c.headAt = true, c.writes
	switch {
	case c.length == 0 && !c.chunked:
		return true
	case c.length > 0 && !c.chunked:
		c.remain = c.length
	}
	return false
}
