package listener

import (
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// reaper enforces the downstream timeouts without a timer per request: every connection notes
// its activity with a few atomic stores, and one goroutine per port sweeps them each second
// (or four times per timeout when that is shorter),
// closing those that took longer than the read timeout to deliver a request (header and body,
// or a TLS handshake) and those idle, with no request in flight, longer than the idle timeout.
type reaper struct {
	read, idle time.Duration
	now        atomic.Int64 // coarse clock, unix nanoseconds
	mu         sync.Mutex
	conns      map[*trackedConn]struct{}
	stop       chan struct{}
	done       chan struct{}
}

// trackedConn is a downstream connection under a reaper.
type trackedConn struct {
	net.Conn
	r *reaper
	// lastActive is the coarse time of the last byte read or written, or request finished.
	lastActive atomic.Int64
	// readingSince is the coarse time the current request's first byte arrived, 0 when no
	// request is being read.
	readingSince atomic.Int64
	inFlight     atomic.Int32
	closeOnce    sync.Once
	// clientIP is the peer address formatted once for X-Forwarded-For.
	clientIP []byte
}

func newReaper(read, idle time.Duration) *reaper {
	r := &reaper{read: read, idle: idle, conns: map[*trackedConn]struct{}{}, stop: make(chan struct{}), done: make(chan struct{})}
	r.now.Store(time.Now().UnixNano())
	go r.sweep(min(time.Second, min(read, idle)/4))
	return r
}

func (r *reaper) sweep(every time.Duration) {
	defer close(r.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case now := <-t.C:
			r.now.Store(now.UnixNano())
			r.closeExpired(now.UnixNano())
		}
	}
}

func (r *reaper) closeExpired(now int64) {
	r.mu.Lock()
	var expired []*trackedConn
	for c := range r.conns {
		if c.inFlight.Load() > 0 {
			continue
		}
		reading := c.readingSince.Load()
		if reading != 0 && now-reading > int64(r.read) || now-c.lastActive.Load() > int64(r.idle) {
			expired = append(expired, c)
		}
	}
	r.mu.Unlock()
	for _, c := range expired {
		_ = c.Close()
	}
}

func (r *reaper) close() {
	close(r.stop)
	<-r.done
}

// trackedListener puts every accepted connection under the reaper.
type trackedListener struct {
	net.Listener
	r *reaper
}

func (l trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, r: l.r}
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		tc.clientIP = a.AddrPort().Addr().Unmap().AppendTo(nil)
	}
	tc.lastActive.Store(l.r.now.Load())
	l.r.mu.Lock()
	l.r.conns[tc] = struct{}{}
	l.r.mu.Unlock()
	return tc, nil
}

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		now := c.r.now.Load()
		c.lastActive.Store(now)
		if c.readingSince.Load() == 0 && c.inFlight.Load() == 0 {
			c.readingSince.Store(now)
		}
	}
	return n, err
}

func (c *trackedConn) Write(b []byte) (int, error) {
	c.lastActive.Store(c.r.now.Load())
	return c.Conn.Write(b)
}

func (c *trackedConn) Close() error {
	c.closeOnce.Do(func() {
		c.r.mu.Lock()
		delete(c.r.conns, c)
		c.r.mu.Unlock()
	})
	return c.Conn.Close()
}

// begin marks a request as handled: it has been read whole and the reaper leaves the
// connection alone until end.
func (c *trackedConn) begin() {
	c.inFlight.Add(1)
	c.readingSince.Store(0)
}

func (c *trackedConn) end() {
	c.lastActive.Store(c.r.now.Load())
	c.inFlight.Add(-1)
}

// tracked returns the tracked connection under a server connection, TLS or not.
func tracked(c net.Conn) *trackedConn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	t, _ := c.(*trackedConn)
	return t
}
