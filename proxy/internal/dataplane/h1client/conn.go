package h1client

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
)

// aLongTimeAgo is the deadline that fails every pending and future read and write at once.
var aLongTimeAgo = time.Unix(1, 0)

// conn is one connection to the endpoint, idle in the pool or carrying one exchange.
type conn struct {
	t *Transport
	// nc is what the exchange reads and writes: raw, or a *tls.Conn over it.
	nc  net.Conn
	raw net.Conn
	br  *bufio.Reader
	// wbuf holds the request head being written; keys the names of its fields, sorted.
	wbuf []byte
	keys []string
	resp http1.Response
	// head is the buffer the last head was parsed from, which resp's fields point into.
	head []byte
	// iov and bufs carry the request's head and inline body to one writev.
	iov  [2][]byte
	bufs net.Buffers
	// onCancel is the watch's callback, made once.
	onCancel func()
	peeker
	// reused says the connection carried an exchange before the one it carries.
	reused bool
	// long says the last head was longer than br, which now reads the bytes after it before
	// the connection's: the connection is not reused.
	long bool
	// idleSince is when the connection went back to the pool, the start of its quarantine;
	// guarded by Transport.mu.
	idleSince time.Time
	// cancelled says the request's context ended while the connection carried it: its
	// deadlines are in the past for good.
	cancelled atomic.Bool
	// stop disarms the watch on the current request's context; nil between exchanges.
	stop      func() bool
	closeOnce sync.Once
}

// dial connects to the endpoint, with the TLS handshake when the transport has TLS. A failed
// connect is the dialer's *net.OpError (Op "dial"); a failed handshake the crypto/tls error.
func (t *Transport) dial(ctx context.Context) (*conn, error) {
	raw, err := t.dialer.DialContext(ctx, "tcp", t.o.Address)
	if err != nil {
		return nil, fmt.Errorf("h1client: %w", err)
	}
	c := &conn{t: t, nc: raw, raw: raw, resp: http1.Response{Fields: make([]http1.Field, 0, 16)}}
	if t.tls != nil {
		tc := tls.Client(raw, t.tls)
		hctx, cancel := context.WithTimeout(ctx, t.o.DialTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			_ = raw.Close()
			return nil, fmt.Errorf("h1client: TLS handshake with %s: %w", t.o.Address, err)
		}
		if p := tc.ConnectionState().NegotiatedProtocol; p != "" && p != "http/1.1" {
			_ = tc.Close()
			return nil, fmt.Errorf("h1client: %s negotiated %q, not http/1.1", t.o.Address, p)
		}
		c.nc = tc
	}
	c.br = bufio.NewReaderSize(c.nc, t.o.BufferSize)
	return c, nil
}

// watch arms the connection against ctx: once it ends, every read and write on the
// connection fails at once, with no goroutine waiting for it.
func (c *conn) watch(ctx context.Context) {
	c.cancelled.Store(false)
	if c.onCancel == nil {
		c.onCancel = c.cancel
	}
	c.stop = context.AfterFunc(ctx, c.onCancel)
}

// cancel fails every read and write of the connection from now on.
func (c *conn) cancel() {
	c.cancelled.Store(true)
	_ = c.nc.SetDeadline(aLongTimeAgo)
}

// unwatch disarms the watch; it reports false when the context ended first, and the
// connection can no longer be used.
func (c *conn) unwatch() bool {
	if c.stop == nil {
		return !c.cancelled.Load()
	}
	ok := c.stop()
	c.stop = nil
	return ok && !c.cancelled.Load()
}

// setReadDeadline sets the read deadline unless the context ended, whose past deadline stays.
func (c *conn) setReadDeadline(d time.Time) {
	_ = c.nc.SetReadDeadline(d)
	if c.cancelled.Load() {
		_ = c.nc.SetDeadline(aLongTimeAgo)
	}
}

// close closes the connection; safe to call more than once.
func (c *conn) close() {
	c.closeOnce.Do(func() { _ = c.nc.Close() })
}

// drained reports whether nothing of the backend's is left to read: nothing buffered, and
// over TLS no decrypted record held by the TLS connection either (a read at a past deadline
// returns such a record's bytes, or a timeout without touching the socket).
func (c *conn) drained() bool {
	if c.br.Buffered() > 0 {
		return false
	}
	if _, ok := c.nc.(*tls.Conn); !ok {
		return true
	}
	_ = c.nc.SetReadDeadline(aLongTimeAgo)
	var b [1]byte
	n, err := c.nc.Read(b[:])
	var ne net.Error
	if n > 0 || !errors.As(err, &ne) || !ne.Timeout() {
		return false
	}
	_ = c.nc.SetReadDeadline(time.Time{})
	return true
}
