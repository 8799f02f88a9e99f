package listener

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"coxswain.dev/coxswain/proxy/internal/dataplane/forward"
)

// passthrough serves one TLS passthrough or TCP port: every accepted connection gets a goroutine
// that, on a TLS passthrough port, reads its ClientHello (within the header read timeout and
// MaxClientHelloBytes), and hands the connection, with the bytes read, to the handler, which
// routes it (by the hello's server name) and copies it to a backend in the background.
type passthrough struct {
	m     *Manager
	port  uint32
	ln    *limitListener
	hello bool
	conns sync.WaitGroup

	mu      sync.Mutex
	reading map[net.Conn]struct{}
	stopped bool
}

func (m *Manager) newPassthrough(port uint32, ln *limitListener, hello bool) *passthrough {
	return &passthrough{m: m, port: port, ln: ln, hello: hello, reading: map[net.Conn]struct{}{}}
}

// serve accepts connections until the listener closes.
func (p *passthrough) serve() error {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return err
		}
		p.conns.Go(func() { p.conn(c) })
	}
}

func (p *passthrough) conn(c net.Conn) {
	if !p.hello {
		p.m.handler.Passthrough(c, p.port, "", nil)
		return
	}
	if !p.start(c) {
		_ = c.Close()
		return
	}
	o := &p.m.opts
	serverName, hello, err := readClientHello(c, o.HeaderReadTimeout, o.MaxClientHelloBytes)
	p.end(c)
	if err != nil {
		outcome := forward.PassthroughBadHello
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			outcome = forward.PassthroughHelloTimeout
		case errors.Is(err, errHelloTooLarge):
			outcome = forward.PassthroughHelloTooLarge
		}
		p.m.handler.PassthroughRefused(outcome)
		_ = c.Close()
		return
	}
	p.m.handler.Passthrough(c, p.port, serverName, hello)
}

func (p *passthrough) start(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return false
	}
	p.reading[c] = struct{}{}
	return true
}

func (p *passthrough) end(c net.Conn) {
	p.mu.Lock()
	delete(p.reading, c)
	p.mu.Unlock()
}

// shutdown stops accepting and closes the connections still sending their hello; the ones
// forwarded already are the handler's, which drains them with its tunnels.
func (p *passthrough) shutdown(ctx context.Context) error {
	var errs []error
	if err := p.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		errs = append(errs, err)
	}
	p.mu.Lock()
	p.stopped = true
	for c := range p.reading {
		_ = c.Close()
	}
	p.mu.Unlock()
	done := make(chan struct{})
	go func() {
		p.conns.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("connections: %w", ctx.Err()))
	}
	return errors.Join(errs...)
}
