package h1client

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
)

// Options bound one endpoint's connections.
type Options struct {
	// Address is the endpoint's host:port; every connection goes there, whatever a request's
	// URL says.
	Address string
	// TLS, when set, speaks HTTP/1.1 over TLS with this configuration (its NextProtos are
	// replaced by http/1.1 alone); nil is plain TCP.
	TLS *tls.Config
	// MaxIdleConns bounds the idle keep-alive connections kept; DefaultMaxIdleConns when zero.
	MaxIdleConns int
	// IdleTimeout closes a connection idle this long; DefaultIdleTimeout when zero.
	IdleTimeout time.Duration
	// DialTimeout bounds connecting, the TLS handshake included; DefaultDialTimeout when zero.
	DialTimeout time.Duration
	// FirstByteTimeout bounds the wait for a response's head once the request was sent
	// whole; zero for none.
	FirstByteTimeout time.Duration
	// MaxHeaderBytes bounds a response's head; DefaultMaxHeaderBytes when zero.
	MaxHeaderBytes int
	// BufferSize is a connection's read buffer, and the pump's copy buffer; DefaultBufferSize
	// when zero.
	BufferSize int
	// WatchInterval is the slice of the wait for a response head between two looks at
	// whether the request's client is gone; DefaultWatchInterval when zero.
	WatchInterval time.Duration
	// MaxInformational bounds the 1xx responses before the final one; DefaultMaxInformational
	// when zero.
	MaxInformational int
	// ReuseQuarantine is how long a connection rests in the pool after an answer before it
	// carries another request, so that bytes a backend writes past the answer's framing
	// arrive, and the peek at checkout sees them, before a request could take them for its
	// answer; DefaultReuseQuarantine when zero, negative for none.
	ReuseQuarantine time.Duration
}

// Defaults of Options.
const (
	DefaultMaxIdleConns     = 256
	DefaultIdleTimeout      = 60 * time.Second
	DefaultDialTimeout      = 5 * time.Second
	DefaultMaxHeaderBytes   = 64 << 10
	DefaultBufferSize       = 32 << 10
	DefaultWatchInterval    = 250 * time.Millisecond
	DefaultMaxInformational = 5
	// DefaultReuseQuarantine is a few round trips inside a data centre: a backend whose extra
	// bytes follow its answer's in another write, or another segment, is seen (a backend that
	// waits longer on purpose is not; SECURITY.md says so). With requests closer together
	// than this, the pool holds more connections: about the requests of this long.
	DefaultReuseQuarantine = 2 * time.Millisecond
)

func (o *Options) defaults() {
	if o.MaxIdleConns == 0 {
		o.MaxIdleConns = DefaultMaxIdleConns
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.MaxHeaderBytes == 0 {
		o.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if o.BufferSize == 0 {
		o.BufferSize = DefaultBufferSize
	}
	if o.WatchInterval == 0 {
		o.WatchInterval = DefaultWatchInterval
	}
	if o.MaxInformational == 0 {
		o.MaxInformational = DefaultMaxInformational
	}
	switch {
	case o.ReuseQuarantine == 0:
		o.ReuseQuarantine = DefaultReuseQuarantine
	case o.ReuseQuarantine < 0:
		o.ReuseQuarantine = 0
	}
}

// Transport is an http.RoundTripper that speaks HTTP/1.1 to one endpoint over its own pool:
// a LIFO of idle connections under a mutex, with no goroutine per connection, where a
// connection back from an answer rests for ReuseQuarantine before it is taken again. An
// exchange runs on the caller's goroutine, and a request body that is not at hand gets one
// pump goroutine while the response is read. It retries only what net/http's Transport
// retries: a request that found its reused connection closed before any byte of an answer.
type Transport struct {
	o      Options
	dialer net.Dialer
	tls    *tls.Config
	limits http1.Limits

	mu sync.Mutex
	// idle holds the idle connections, the most recently used last.
	idle []*conn
	// sweep closes the connections idle too long; armed while idle is not empty.
	sweep    *time.Timer
	sweeping bool
}

// New returns a transport to o.Address.
func New(o Options) *Transport {
	o.defaults()
	t := &Transport{
		o:      o,
		dialer: net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second},
		limits: http1.Limits{MaxHeaderBytes: o.MaxHeaderBytes},
	}
	if o.TLS != nil {
		t.tls = o.TLS.Clone()
		t.tls.NextProtos = []string{"http/1.1"}
	}
	return t
}

// TLSConfig returns the TLS configuration the transport's connections use, nil for plain TCP.
func (t *Transport) TLSConfig() *tls.Config { return t.tls }

// get returns an idle connection that is still open and holds no stray byte, or a new one.
func (t *Transport) get(ctx context.Context) (*conn, error) {
	for {
		c := t.popIdle()
		if c == nil {
			return t.dial(ctx)
		}
		if c.usable() {
			return c, nil
		}
		c.close()
	}
}

// popIdle takes the most recently used idle connection whose quarantine is over, closing
// every one idle too long; it returns nil when there is none (the younger ones stay).
func (t *Transport) popIdle() *conn {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(t.idle)
	// idle is in the order the connections came back, so the rested ones come first.
	i := sort.Search(n, func(j int) bool { return now.Sub(t.idle[j].idleSince) < t.o.ReuseQuarantine })
	if i == 0 {
		return nil
	}
	c := t.idle[i-1]
	if now.Sub(c.idleSince) > t.o.IdleTimeout {
		// The others before it were idle longer still.
		for _, old := range t.idle[:i] {
			old.close()
		}
		rest := copy(t.idle, t.idle[i:])
		clear(t.idle[rest:])
		t.idle = t.idle[:rest]
		return nil
	}
	copy(t.idle[i-1:], t.idle[i:])
	t.idle[n-1] = nil
	t.idle = t.idle[:n-1]
	return c
}

// put keeps c idle for the next request, closing the least recently used connection when
// the pool is full.
func (t *Transport) put(c *conn) {
	c.reused = true
	t.mu.Lock()
	defer t.mu.Unlock()
	// Stamped under the lock, so that idle stays in the order of the stamps.
	c.idleSince = time.Now()
	if len(t.idle) >= t.o.MaxIdleConns {
		t.idle[0].close()
		copy(t.idle, t.idle[1:])
		t.idle = t.idle[:len(t.idle)-1]
	}
	t.idle = append(t.idle, c)
	if !t.sweeping {
		t.sweeping = true
		if t.sweep == nil {
			t.sweep = time.AfterFunc(t.o.IdleTimeout, t.sweepIdle)
		} else {
			t.sweep.Reset(t.o.IdleTimeout)
		}
	}
}

// sweepIdle closes the connections idle longer than IdleTimeout, and comes back when the
// oldest of the others would be.
func (t *Transport) sweepIdle() {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	n := 0
	for n < len(t.idle) && now.Sub(t.idle[n].idleSince) >= t.o.IdleTimeout {
		t.idle[n].close()
		n++
	}
	rest := copy(t.idle, t.idle[n:])
	clear(t.idle[rest:])
	t.idle = t.idle[:rest]
	if len(t.idle) == 0 {
		t.sweeping = false
		return
	}
	t.sweep.Reset(t.o.IdleTimeout - now.Sub(t.idle[0].idleSince))
}

// CloseIdleConnections closes every idle connection; exchanges in flight finish on theirs.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.idle {
		c.close()
	}
	clear(t.idle)
	t.idle = t.idle[:0]
}

// IdleConns returns the number of idle connections, for tests and metrics.
func (t *Transport) IdleConns() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.idle)
}

var _ http.RoundTripper = (*Transport)(nil)
