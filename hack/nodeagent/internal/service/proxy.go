package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
)

// Proxy serves frontends in user space. A TCP frontend is a listener that forwards each
// connection it accepts to one of the frontend's backends, round robin, and copies bytes both
// ways until both sides have closed, one fails, or the connection idles. A UDP frontend is a
// socket that sends each client's datagrams to one backend (chosen round robin when the
// client's first datagram comes) and the backend's answers back, until the client idles.
type Proxy struct {
	log         logr.Logger
	idle        time.Duration
	dialTimeout time.Duration
	ctx         context.Context // ends dials in progress when the proxy closes
	cancel      context.CancelFunc

	mu        sync.Mutex
	closed    bool
	listeners map[frontendKey]server
	owned     map[string]map[frontendKey]bool // Service key -> its served frontends
	conns     map[*net.TCPConn]struct{}
	wg        sync.WaitGroup
}

type frontendKey struct {
	addr     netip.AddrPort
	protocol corev1.Protocol
}

func (k frontendKey) String() string { return string(k.protocol) + " " + k.addr.String() }

// server is a frontend's listener of either protocol.
type server interface {
	owner() string
	setBackends(backends []netip.AddrPort)
	// close stops taking new connections (UDP: ends every session).
	close()
}

// rotation is a frontend's backends and whose turn is next.
type rotation struct {
	backends atomic.Pointer[[]netip.AddrPort]
	next     atomic.Uint64
}

// turn is the list of backends starting with the one whose turn it is.
func (r *rotation) turn() []netip.AddrPort {
	bs := *r.backends.Load()
	start := int((r.next.Add(1) - 1) % uint64(len(bs))) //nolint:gosec // a remainder of a length
	return append(bs[start:len(bs):len(bs)], bs[:start]...)
}

type listener struct {
	rotation
	key string
	ln  *net.TCPListener
}

func (l *listener) owner() string                         { return l.key }
func (l *listener) setBackends(backends []netip.AddrPort) { l.backends.Store(&backends) }
func (l *listener) close()                                { _ = l.ln.Close() } // the accept loop ends on the error

// NewProxy returns a proxy serving nothing yet. A connection on which no byte moved either way
// for idle is closed; a backend that does not accept within dialTimeout is skipped.
func NewProxy(log logr.Logger, idle, dialTimeout time.Duration) *Proxy {
	ctx, cancel := context.WithCancel(context.Background())
	return &Proxy{
		log: log, idle: idle, dialTimeout: dialTimeout, ctx: ctx, cancel: cancel,
		listeners: map[frontendKey]server{}, owned: map[string]map[frontendKey]bool{},
		conns: map[*net.TCPConn]struct{}{},
	}
}

// Set makes the proxy serve exactly fs for the Service key. Listeners of frontends no longer
// wanted close (their connections may finish), new ones open, and the others send their next
// connections to the new backends. A frontend without backends is not served: connections to
// it are refused.
func (p *Proxy) Set(key string, fs []Frontend) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	want := map[frontendKey][]netip.AddrPort{}
	for _, f := range fs {
		if (f.Protocol == corev1.ProtocolTCP || f.Protocol == corev1.ProtocolUDP) && len(f.Backends) > 0 {
			want[frontendKey{f.Addr, f.Protocol}] = f.Backends
		}
	}
	for a := range p.owned[key] {
		if _, ok := want[a]; !ok {
			p.closeListener(key, a)
		}
	}
	var errs []error
	for a, backends := range want {
		if l, ok := p.listeners[a]; ok {
			if l.owner() != key {
				errs = append(errs, fmt.Errorf("serve %s: already served for %s", a, l.owner()))
				continue
			}
			l.setBackends(backends)
			continue
		}
		if err := p.listen(key, a, backends); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (p *Proxy) listen(key string, a frontendKey, backends []netip.AddrPort) error {
	var l server
	if a.protocol == corev1.ProtocolUDP {
		conn, err := (&net.ListenConfig{}).ListenPacket(p.ctx, "udp4", a.addr.String())
		if err != nil {
			return fmt.Errorf("serve %s: %w", a, err)
		}
		u := &udpListener{key: key, conn: conn.(*net.UDPConn), sessions: map[netip.AddrPort]*udpSession{}}
		u.setBackends(backends)
		p.wg.Add(1)
		go p.serveUDP(u)
		l = u
	} else {
		ln, err := (&net.ListenConfig{}).Listen(p.ctx, "tcp4", a.addr.String())
		if err != nil {
			return fmt.Errorf("serve %s: %w", a, err)
		}
		t := &listener{key: key, ln: ln.(*net.TCPListener)}
		t.setBackends(backends)
		p.wg.Add(1)
		go p.serve(t)
		l = t
	}
	p.listeners[a] = l
	if p.owned[key] == nil {
		p.owned[key] = map[frontendKey]bool{}
	}
	p.owned[key][a] = true
	p.log.V(1).Info("Serving", "service", key, "frontend", a.String())
	return nil
}

func (p *Proxy) closeListener(key string, a frontendKey) {
	if l, ok := p.listeners[a]; ok {
		l.close()
		delete(p.listeners, a)
	}
	delete(p.owned[key], a)
	if len(p.owned[key]) == 0 {
		delete(p.owned, key)
	}
	p.log.V(1).Info("Stopped serving", "service", key, "frontend", a.String())
}

// Close stops every listener and connection and waits until their goroutines have ended.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.cancel()
	for a, l := range p.listeners {
		l.close()
		delete(p.listeners, a)
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) serve(l *listener) {
	defer p.wg.Done()
	for {
		c, err := l.ln.AcceptTCP()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil { // out of descriptors, say: let some connections end
			p.log.Error(err, "Accept failed", "address", l.ln.Addr().String())
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if !p.track(c) {
			_ = c.Close()
			return
		}
		p.wg.Add(1)
		go p.forward(l, c)
	}
}

// track records c so that Close can end it; false once the proxy is closed.
func (p *Proxy) track(c *net.TCPConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(cs ...*net.TCPConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		_ = c.Close()
	}
}

func (p *Proxy) forward(l *listener, client *net.TCPConn) {
	defer p.wg.Done()
	backend, err := p.dial(l)
	if err != nil {
		// Reset rather than a clean close: the client learns at once that nothing answered.
		_ = client.SetLinger(0)
		p.untrack(client)
		p.log.V(1).Info("Refused connection", "address", l.ln.Addr().String(), "reason", err.Error())
		return
	}
	if !p.track(backend) {
		p.untrack(client, backend)
		return
	}
	splice(client, backend, p.idle)
	p.untrack(client, backend)
}

// dial connects to the listener's next backend, trying up to three of them.
func (p *Proxy) dial(l *listener) (*net.TCPConn, error) {
	backends := l.turn()
	var errs []error
	for _, b := range backends[:min(len(backends), 3)] {
		c, err := (&net.Dialer{Timeout: p.dialTimeout}).DialContext(p.ctx, "tcp4", b.String())
		if err == nil {
			return c.(*net.TCPConn), nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("no backend answered: %w", errors.Join(errs...))
}

// splice copies both ways between a and b. A side that ends its stream has the other side's
// write half closed, and the copy the other way goes on; an error either way, or no byte
// either way for idle, closes both connections.
func splice(a, b *net.TCPConn, idle time.Duration) {
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	errc := make(chan error, 2)
	half := func(dst, src *net.TCPConn) {
		_, err := io.Copy(dst, &idleReader{c: src, last: &last, idle: idle})
		if err == nil {
			err = dst.CloseWrite()
		}
		errc <- err
	}
	go half(b, a)
	go half(a, b)
	for range 2 {
		if err := <-errc; err != nil {
			_, _ = a.Close(), b.Close()
		}
	}
}

// idleReader reads from c, failing with a timeout once no byte moved either way (last) for idle.
type idleReader struct {
	c    *net.TCPConn
	last *atomic.Int64
	idle time.Duration
}

func (r *idleReader) Read(buf []byte) (int, error) {
	for {
		if err := r.c.SetReadDeadline(time.Now().Add(r.idle)); err != nil {
			return 0, err
		}
		n, err := r.c.Read(buf)
		if n > 0 {
			r.last.Store(time.Now().UnixNano())
		}
		var ne net.Error
		if n == 0 && errors.As(err, &ne) && ne.Timeout() && time.Since(time.Unix(0, r.last.Load())) < r.idle {
			continue // the other way is busy
		}
		return n, err
	}
}
