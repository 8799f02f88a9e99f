package upstream

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// watchdog bounds how long an upstream connection may wait for the first byte of a response
// without arming a timer per request: each connection notes, with two atomic stores, when it
// starts and stops waiting, and one goroutine sweeps the connections a few times per timeout
// and aborts the reads that waited too long (the exchange then fails with a timeout). Routes
// with their own timeouts use exact per-request deadlines instead.
type watchdog struct {
	timeout time.Duration
	now     atomic.Int64 // coarse clock, unix nanoseconds, advanced by the sweeper
	mu      sync.Mutex
	conns   map[*watchedConn]struct{}
	stop    chan struct{}
	done    chan struct{}
}

// watchedConn is an upstream connection under a watchdog.
type watchedConn struct {
	net.Conn
	w *watchdog
	// waitingSince is the coarse time a request was written with no response byte read
	// since, 0 when the connection waits for nothing.
	waitingSince atomic.Int64
	closeOnce    sync.Once
}

func newWatchdog(timeout time.Duration) *watchdog {
	w := &watchdog{timeout: timeout, conns: map[*watchedConn]struct{}{}, stop: make(chan struct{}), done: make(chan struct{})}
	w.now.Store(time.Now().UnixNano())
	go w.sweep(min(max(timeout/8, 10*time.Millisecond), time.Second))
	return w
}

func (w *watchdog) watch(c net.Conn) net.Conn {
	wc := &watchedConn{Conn: c, w: w}
	w.mu.Lock()
	w.conns[wc] = struct{}{}
	w.mu.Unlock()
	return wc
}

func (w *watchdog) sweep(every time.Duration) {
	defer close(w.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case now := <-t.C:
			w.now.Store(now.UnixNano())
			w.abortStuck(now.UnixNano())
		}
	}
}

// abortStuck makes the blocked reads of connections that waited past the timeout return.
func (w *watchdog) abortStuck(now int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for c := range w.conns {
		if since := c.waitingSince.Load(); since != 0 && now-since > int64(w.timeout) {
			_ = c.SetReadDeadline(time.Unix(1, 0))
		}
	}
}

func (w *watchdog) close() {
	close(w.stop)
	<-w.done
}

// Write starts the wait for a response.
func (c *watchedConn) Write(b []byte) (int, error) {
	if c.waitingSince.Load() == 0 {
		c.waitingSince.Store(c.w.now.Load())
	}
	return c.Conn.Write(b)
}

// Read ends the wait once a byte arrives.
func (c *watchedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.waitingSince.Load() != 0 {
		c.waitingSince.Store(0)
	}
	return n, err
}

// Close forgets the connection.
func (c *watchedConn) Close() error {
	c.closeOnce.Do(func() {
		c.w.mu.Lock()
		delete(c.w.conns, c)
		c.w.mu.Unlock()
	})
	return c.Conn.Close()
}
