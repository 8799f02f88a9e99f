package connlimit

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Conn is a connection of a Listener. It holds its slot until closed.
type Conn struct {
	net.Conn
	l      *Listener
	source string
	key    connKey
	// slot is the kind of slot the connection settled into, under l.mu.
	slot slot
	// handshakeBy, when set, is the latest deadline the handshake may have.
	handshakeBy time.Time
	// written counts the bytes written to the connection.
	written atomic.Int64

	mu sync.Mutex
	// handshook is set once the server clears the handshake deadline.
	handshook bool
	// busy counts the calls in progress that count as activity; last is when the latest ended.
	busy int
	last time.Time
	idle *time.Timer
	// closed is set by Close; the idle timer then stops for good.
	closed bool

	once sync.Once
}

// slot is the kind of slot a connection holds once its handshake ended.
type slot int

const (
	// slotPending: the handshake has not ended (or the server never settles connections).
	slotPending slot = iota
	slotCommon
	slotReserved
)

// ErrUnverifiedOverCap is Settle's error for a connection without a verified client
// certificate when the common slots are taken.
var ErrUnverifiedOverCap = errors.New("connlimit: the listener holds its maximum of connections without a verified client certificate")

// Settle ends the handshake of c, verified saying whether it verified a client certificate: c
// moves to a reserved slot when verified and one is free, else to a common slot while one is
// free. Otherwise Settle closes c, reports it refused (ReasonTooManyUnverified) and returns
// ErrUnverifiedOverCap. Settling again does nothing.
func (c *Conn) Settle(verified bool) error {
	if c.l.settle(c, verified) {
		return nil
	}
	if c.l.cfg.Refused != nil {
		c.l.cfg.Refused(ReasonTooManyUnverified, c.source)
	}
	_ = c.Close()
	return ErrUnverifiedOverCap
}

// SetDeadline holds the handshake deadline, the first one the server sets, to handshakeBy when
// that is earlier. gRPC sets a deadline before the TLS and HTTP/2 handshakes and clears it after.
func (c *Conn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	switch {
	case c.handshook:
	case t.IsZero():
		c.handshook = true
	case !c.handshakeBy.IsZero() && c.handshakeBy.Before(t):
		t = c.handshakeBy
	}
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

// Write writes to the connection and counts what it wrote.
func (c *Conn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.written.Add(int64(n))
	return n, err
}

// Written returns how many bytes were written to the connection: what left the server's
// buffers, TLS records included.
func (c *Conn) Written() int64 { return c.written.Load() }

// Close closes the connection and gives its slot back, once.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.mu.Lock()
		c.closed = true
		if c.idle != nil {
			c.idle.Stop()
		}
		c.mu.Unlock()
		c.l.release(c)
	})
	return err
}

// Closed reports whether Close was called.
func (c *Conn) Closed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Source returns the source address the connection counts against.
func (c *Conn) Source() string { return c.source }

// Busy marks a call in progress that counts as activity for the idle timeout; call the returned
// function when it ends.
func (c *Conn) Busy() (done func()) {
	c.mu.Lock()
	c.busy++
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			c.busy--
			c.last = c.l.cfg.Now()
			c.mu.Unlock()
		})
	}
}

// checkIdle closes the connection when it has had no busy call for the idle timeout, and looks
// again later otherwise.
func (c *Conn) checkIdle() {
	c.mu.Lock()
	idleFor := c.l.cfg.Now().Sub(c.last)
	switch {
	case c.closed:
	case c.busy > 0:
		c.idle.Reset(c.l.cfg.IdleTimeout)
	case idleFor < c.l.cfg.IdleTimeout:
		c.idle.Reset(c.l.cfg.IdleTimeout - idleFor)
	default:
		c.mu.Unlock()
		_ = c.Close()
		return
	}
	c.mu.Unlock()
}
