package listener

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"coxswain.dev/coxswain/proxy/internal/dataplane/forward"
	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
)

// passthrough serves one TLS or TCP port: every accepted connection gets a goroutine that, on
// a TLS port, reads its ClientHello (within the header read timeout and MaxClientHelloBytes),
// and hands the connection, with the bytes read, to the handler, which routes it (by the
// hello's server name), has it terminated when its virtual host terminates TLS (see
// terminate), and copies it to a backend in the background.
type passthrough struct {
	m     *Manager
	port  uint32
	ln    *limitListener
	hello bool
	conns sync.WaitGroup
	// accepting is closed when serve returns: no connection is added to conns after it, so
	// conns may be waited for.
	accepting chan struct{}
	// terminator is terminate, on a TLS port.
	terminator forward.Terminator

	mu      sync.Mutex
	reading map[net.Conn]struct{}
	stopped bool
}

func (m *Manager) newPassthrough(port uint32, ln *limitListener, hello bool) *passthrough {
	p := &passthrough{m: m, port: port, ln: ln, hello: hello, reading: map[net.Conn]struct{}{}, accepting: make(chan struct{})}
	if hello {
		p.terminator = p.terminate
	}
	return p
}

// serve accepts connections until the listener closes.
func (p *passthrough) serve() error {
	defer close(p.accepting)
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
		p.m.handler.Passthrough(c, p.port, "", nil, nil)
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
	p.m.handler.Passthrough(c, p.port, serverName, hello, p.terminator)
}

// errStopped fails the handshake of a connection routed while the port shuts down.
var errStopped = errors.New("tls: listener shutting down")

// terminate completes the TLS handshake of c, whose opening bytes (the ClientHello) were read
// as hello, with the first of certs the client supports, within the header read timeout, and
// returns the decrypted connection. A shutdown closes c meanwhile, as it closes a connection
// still sending its hello. Client certificates are not asked for: spec.tls.frontend validates
// the clients of HTTPS listeners only.
func (p *passthrough) terminate(c net.Conn, hello []byte, certs []*router.Certificate) (net.Conn, error) {
	if !p.start(c) {
		return nil, errStopped
	}
	defer p.end(c)
	tc := tls.Server(&replayConn{Conn: c, replay: hello}, &tls.Config{
		MinVersion:   tls.VersionTLS12,
		CipherSuites: cipherSuites,
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			return pickCertificate(certs, hello), nil
		},
	})
	_ = c.SetDeadline(time.Now().Add(p.m.opts.HeaderReadTimeout))
	err := tc.HandshakeContext(context.Background())
	_ = c.SetDeadline(time.Time{})
	if err != nil {
		return nil, err
	}
	return tc, nil
}

// replayConn reads replay before the connection: the bytes read from it already.
type replayConn struct {
	net.Conn
	replay []byte
}

func (r *replayConn) Read(b []byte) (int, error) {
	if len(r.replay) > 0 {
		n := copy(b, r.replay)
		r.replay = r.replay[n:]
		return n, nil
	}
	return r.Conn.Read(b)
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
		<-p.accepting
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
