package h1server

import (
	"errors"
	"sync"
	"syscall"
	"time"
)

// poller holds the parked connections of a server: plaintext keep-alive connections idle
// past Options.ParkAfter, whose goroutine returned. One goroutine waits on a private epoll
// set (each fd registered one-shot for input or the peer's close); an event takes the
// connection out and starts a goroutine that serves it again. Once a second it closes the
// parked connections past their idle timeout. Whoever takes a connection out of the set (the
// event, the sweep, a shutdown) owns it from then on.
type poller struct {
	srv  *Server
	ep   int
	wake [2]int
	done chan struct{}

	mu     sync.Mutex
	parked map[int]*conn
	closed bool
}

const (
	// pollEvents wake a parked connection: input, or its peer closing.
	pollEvents = syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT
	// sweepEvery is how often the parked connections' idle timeouts are checked.
	sweepEvery = time.Second
)

func newPoller(s *Server) (*poller, error) {
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	p := &poller{srv: s, ep: ep, done: make(chan struct{}), parked: map[int]*conn{}}
	if err := syscall.Pipe2(p.wake[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		_ = syscall.Close(ep)
		return nil, err
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(p.wake[0])} //nolint:gosec // a file descriptor fits in int32
	if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, p.wake[0], &ev); err != nil {
		p.closeFDs()
		return nil, err
	}
	go p.run()
	return p, nil
}

func (p *poller) closeFDs() {
	_ = syscall.Close(p.ep)
	_ = syscall.Close(p.wake[0])
	_ = syscall.Close(p.wake[1])
}

// park adds c to the set; false when it cannot be, and c goes on waiting itself.
func (p *poller) park(c *conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.parked[c.fd] = c
	ev := syscall.EpollEvent{Events: pollEvents, Fd: int32(c.fd)} //nolint:gosec // a file descriptor fits in int32
	if err := syscall.EpollCtl(p.ep, syscall.EPOLL_CTL_ADD, c.fd, &ev); err != nil {
		delete(p.parked, c.fd)
		return false
	}
	return true
}

// take removes c from the set and reports whether it was there: the caller owns it.
func (p *poller) take(c *conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.takeLocked(c.fd, c)
}

func (p *poller) takeLocked(fd int, want *conn) bool {
	c, ok := p.parked[fd]
	if !ok || want != nil && c != want {
		return false
	}
	delete(p.parked, fd)
	_ = syscall.EpollCtl(p.ep, syscall.EPOLL_CTL_DEL, fd, nil)
	return true
}

func (p *poller) run() {
	defer close(p.done)
	defer p.closeFDs()
	events := make([]syscall.EpollEvent, 128)
	next := time.Now().Add(sweepEvery)
	for {
		n, err := syscall.EpollWait(p.ep, events, int(sweepEvery/time.Millisecond))
		if err != nil && !errors.Is(err, syscall.EINTR) {
			return
		}
		for _, ev := range events[:max(n, 0)] {
			if int(ev.Fd) == p.wake[0] {
				return
			}
			p.wakeUp(int(ev.Fd))
		}
		if now := time.Now(); now.After(next) {
			p.sweep(now)
			next = now.Add(sweepEvery)
		}
	}
}

// wakeUp serves the connection of fd again on a new goroutine.
func (p *poller) wakeUp(fd int) {
	p.mu.Lock()
	c := p.parked[fd]
	ok := c != nil && p.takeLocked(fd, c)
	p.mu.Unlock()
	if ok {
		go p.srv.run(c)
	}
}

// sweep closes the parked connections past their idle timeout.
func (p *poller) sweep(now time.Time) {
	var expired []*conn
	p.mu.Lock()
	for fd, c := range p.parked {
		if now.After(c.idleBy) && p.takeLocked(fd, c) {
			expired = append(expired, c)
		}
	}
	p.mu.Unlock()
	for _, c := range expired {
		c.closeParked()
		p.srv.untrack(c)
	}
}

// stop ends the poller's goroutine once the set is empty; parked connections are closed
// before by the server's Close.
func (p *poller) stop() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		_, _ = syscall.Write(p.wake[1], []byte{0})
	}
	p.mu.Unlock()
	<-p.done
}
