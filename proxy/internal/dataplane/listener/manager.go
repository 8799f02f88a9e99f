package listener

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"coxswain.dev/coxswain/proxy/internal/dataplane/forward"
	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
)

// Options configure the listeners. Zero values take the defaults.
type Options struct {
	// Address returns the address to bind for a table port: ":<port>" when nil. A proxy that
	// may not bind low ports maps them here (for example port+8000).
	Address func(port uint32) string
	// HeaderReadTimeout bounds reading a request's header, and a TLS handshake; 10s when zero.
	HeaderReadTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle this long; 120s when zero.
	IdleTimeout time.Duration
	// SendTimeout closes an HTTP/2 connection whose client accepts no bytes for this long;
	// 60s when zero.
	SendTimeout time.Duration
	// MaxHeaderBytes bounds a request's header, on HTTP/2 as the header list size the proxy
	// advertises; 32 KiB when zero.
	MaxHeaderBytes int
	// MaxHeaderCount bounds the fields of a request head the native engine parses; 431 beyond
	// it. The codec's default when zero.
	MaxHeaderCount int
	// MaxConnections bounds the open downstream connections of the proxy, all ports together;
	// connections beyond it are closed on accept. 16384 when zero.
	MaxConnections int
	// MaxConnectionsPerClient bounds the open downstream connections of one client IP
	// address, all ports together; connections beyond it are closed on accept.
	// DefaultMaxConnectionsPerClient when zero.
	MaxConnectionsPerClient int
	// HTTP2MaxConcurrentStreams bounds the streams open at once on one HTTP/2 connection; 100
	// when zero.
	HTTP2MaxConcurrentStreams int
	// HTTP2StreamWindow and HTTP2ConnectionWindow bound the request body bytes a client may
	// send ahead of the backend reading them, per stream and per connection;
	// DefaultHTTP2StreamWindow and DefaultHTTP2ConnectionWindow when zero.
	HTTP2StreamWindow     int32
	HTTP2ConnectionWindow int32
	// DrainTimeout bounds the drain of a port a new table no longer has; 30s when zero.
	DrainTimeout time.Duration
	// ConnectionRefused, when set, is called for every connection closed on accept because of
	// MaxConnections.
	ConnectionRefused func()
	// ClientConnectionRefused, when set, is called for every connection closed on accept because
	// its client address held MaxConnectionsPerClient.
	ClientConnectionRefused func()
	// Overload, when set, closes new connections on accept while the proxy is overloaded.
	Overload *Overload
	// Engine serves HTTP/1.1; http1.DefaultEngine when empty. HTTP/2 is Go's server either way.
	Engine http1.Engine
	// MaxClientHelloBytes bounds what a TLS passthrough port reads of a connection before its
	// ClientHello is complete (HeaderReadTimeout bounds the time); DefaultMaxClientHelloBytes
	// when zero.
	MaxClientHelloBytes int
	// UDPIdleTimeout ends a UDP flow that carried nothing either way this long;
	// DefaultUDPIdleTimeout when zero.
	UDPIdleTimeout time.Duration
	// MaxUDPFlows bounds the UDP flows of the proxy, all ports together; a datagram that would
	// open one more is dropped. DefaultMaxUDPFlows when zero.
	MaxUDPFlows int
	// MaxUDPFlowsPerClient bounds the UDP flows of one client IP address, all ports together;
	// a datagram that would open one more is dropped. DefaultMaxUDPFlowsPerClient when zero.
	MaxUDPFlowsPerClient int
	// MaxUDPFlowsPerListener bounds the UDP flows of one port; a datagram that would open one
	// more is dropped. DefaultMaxUDPFlowsPerListener when zero.
	MaxUDPFlowsPerListener int
}

// Defaults of the connection limits, which the proxy's flags show.
const (
	DefaultHeaderReadTimeout = 10 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	DefaultMaxConnections    = 16384
	// DefaultMaxConnectionsPerClient is a quarter of the connection limit: a client behind one
	// address cannot take more, and four such clients are needed to fill it.
	DefaultMaxConnectionsPerClient   = DefaultMaxConnections / 4
	DefaultHTTP2MaxConcurrentStreams = 100
	// The HTTP/2 receive windows: what one connection can pin of the proxy's memory with
	// request bodies its backends do not read (Envoy's edge recommendation for the stream).
	DefaultHTTP2StreamWindow     = 64 << 10
	DefaultHTTP2ConnectionWindow = 512 << 10
)

func (o *Options) defaults() {
	if o.Engine == "" {
		o.Engine = http1.DefaultEngine
	}
	if o.Address == nil {
		o.Address = func(port uint32) string { return ":" + strconv.FormatUint(uint64(port), 10) }
	}
	o.HeaderReadTimeout = orDefault(o.HeaderReadTimeout, DefaultHeaderReadTimeout)
	o.IdleTimeout = orDefault(o.IdleTimeout, DefaultIdleTimeout)
	o.SendTimeout = orDefault(o.SendTimeout, forward.DefaultSendTimeout)
	o.DrainTimeout = orDefault(o.DrainTimeout, 30*time.Second)
	if o.MaxHeaderBytes == 0 {
		o.MaxHeaderBytes = forward.DefaultMaxHeaderBytes
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	if o.HTTP2MaxConcurrentStreams == 0 {
		o.HTTP2MaxConcurrentStreams = DefaultHTTP2MaxConcurrentStreams
	}
	if o.HTTP2StreamWindow == 0 {
		o.HTTP2StreamWindow = DefaultHTTP2StreamWindow
	}
	if o.HTTP2ConnectionWindow == 0 {
		o.HTTP2ConnectionWindow = DefaultHTTP2ConnectionWindow
	}
	o.UDPIdleTimeout = orDefault(o.UDPIdleTimeout, DefaultUDPIdleTimeout)
	if o.MaxUDPFlows == 0 {
		o.MaxUDPFlows = DefaultMaxUDPFlows
	}
	if o.MaxUDPFlowsPerListener == 0 {
		o.MaxUDPFlowsPerListener = DefaultMaxUDPFlowsPerListener
	}
	if o.MaxUDPFlowsPerClient == 0 {
		o.MaxUDPFlowsPerClient = DefaultMaxUDPFlowsPerClient
	}
	if o.MaxClientHelloBytes == 0 {
		o.MaxClientHelloBytes = DefaultMaxClientHelloBytes
	}
	if o.MaxConnectionsPerClient == 0 {
		o.MaxConnectionsPerClient = DefaultMaxConnectionsPerClient
	}
	if o.ConnectionRefused == nil {
		o.ConnectionRefused = func() {}
	}
	if o.ClientConnectionRefused == nil {
		o.ClientConnectionRefused = func() {}
	}
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Manager keeps one server per port of the table applied last. Prepare and its Commit run
// from one goroutine at a time.
type Manager struct {
	log     logr.Logger
	opts    Options
	handler *forward.Handler
	mu      sync.Mutex
	servers map[uint32]*server
	// draining are servers being drained in the background after a table dropped them.
	draining sync.WaitGroup
	// open counts the open downstream connections of every port, clients those of each client
	// address.
	open    atomic.Int64
	clients *clientConns
	// udpFlows counts the UDP flows of every port, udpClients those of each client address.
	udpFlows   atomic.Int64
	udpClients *clientConns
}

// NewManager returns a manager whose servers serve through handler.
func NewManager(log logr.Logger, handler *forward.Handler, opts Options) *Manager {
	opts.defaults()
	return &Manager{
		log: log, opts: opts, handler: handler, servers: map[uint32]*server{},
		clients: newClientConns(opts.MaxConnectionsPerClient), udpClients: newClientConns(opts.MaxUDPFlowsPerClient),
	}
}

// Plan is the listener change a table needs: Prepare has bound the new ports; Commit, called
// once the table is swapped in, releases the ports it dropped and rebinds the ports whose
// protocol changed; Abort, called instead when the table is refused, releases the new ports.
type Plan struct {
	m       *Manager
	added   map[uint32]*server
	removed []*server
	rebind  map[uint32]router.Protocol
}

// Prepare binds every port of table that is not bound yet. An error (a port in use, say)
// leaves the listeners as they were.
func (m *Manager) Prepare(table *router.Table) (*Plan, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	plan := &Plan{m: m, added: map[uint32]*server{}, rebind: map[uint32]router.Protocol{}}
	want := map[uint32]bool{}
	for _, p := range table.Ports() {
		want[p.Number] = true
		cur, ok := m.servers[p.Number]
		switch {
		case ok && sameServer(cur.protocol, p.Protocol):
		case ok:
			plan.removed = append(plan.removed, cur)
			plan.rebind[p.Number] = p.Protocol
		default:
			s, err := m.newServer(p.Number, p.Protocol)
			if err != nil {
				plan.Abort()
				return nil, err
			}
			plan.added[p.Number] = s
		}
	}
	for n, s := range m.servers {
		if !want[n] {
			plan.removed = append(plan.removed, s)
		}
	}
	return plan, nil
}

// sameServer reports whether a port's server for protocol a serves protocol b as it is: a TLS
// passthrough port that gains a listener in Terminate mode, or loses its last, keeps its
// server and its connections, since both read the ClientHello and look the route up in the
// table of the moment.
func sameServer(a, b router.Protocol) bool {
	return a == b || (tlsByName(a) && tlsByName(b))
}

// tlsByName reports whether a port routes TLS connections by their ClientHello's server name.
func tlsByName(p router.Protocol) bool { return p == router.TLSPassthrough || p == router.TLS }

// Abort releases the ports Prepare bound.
func (p *Plan) Abort() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, s := range p.added {
		_ = s.shutdown(ctx)
	}
}

// Commit makes the plan's servers current and drains the dropped ones in the background. A
// port whose protocol changed is rebound once its old server stopped accepting; failing that
// is logged, as the table is already serving.
func (p *Plan) Commit() {
	m := p.m
	m.mu.Lock()
	defer m.mu.Unlock()
	for n, s := range p.added {
		m.servers[n] = s
	}
	for _, s := range p.removed {
		delete(m.servers, s.port)
		m.drain(s)
	}
	for n, proto := range p.rebind {
		s, err := m.rebind(n, proto)
		if err != nil {
			m.log.Error(err, "Could not rebind port with its new protocol", "port", n, "protocol", proto.String())
			continue
		}
		m.servers[n] = s
	}
}

// rebind retries binding for a short while: the old socket closes as its drain starts.
func (m *Manager) rebind(port uint32, proto router.Protocol) (*server, error) {
	var err error
	for range 50 {
		var s *server
		if s, err = m.newServer(port, proto); err == nil {
			return s, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, err
}

func (m *Manager) drain(s *server) {
	m.draining.Add(1)
	go func() {
		defer m.draining.Done()
		ctx, cancel := context.WithTimeout(context.Background(), m.opts.DrainTimeout)
		defer cancel()
		if err := s.shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			m.log.Error(err, "Drained port with errors", "port", s.port)
		}
		m.log.V(1).Info("Released port", "port", s.port)
	}()
}

func (m *Manager) connectionRefused() { m.opts.ConnectionRefused() }

// Addr returns the bound address of a table port, for tests and logs.
func (m *Manager) Addr(port uint32) (net.Addr, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.servers[port]
	if !ok {
		return nil, false
	}
	return s.addr, true
}

// OpenConnections returns the number of open downstream connections.
func (m *Manager) OpenConnections() float64 {
	return float64(m.open.Load())
}

// StopAccepting closes the socket of every port, so that no new connection is accepted; the
// connections already accepted are served on. Shutdown does it too: calling it first lets the
// caller tell that moment apart (and log it).
func (m *Manager) StopAccepting() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.servers {
		if s.udp != nil {
			_ = s.udp.conn.Close()
			continue
		}
		if err := s.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			m.log.Error(err, "Could not close listener", "port", s.port)
		}
	}
}

// Shutdown stops every server: they stop accepting, HTTP/2 clients are told to go away,
// HTTP/1.1 connections close after their current response (idle ones at once), and requests in
// flight get until ctx ends, when what is left is closed. It returns as soon as every
// connection served by the ports is done. That ctx ended is not an error here: the caller
// knows, and only the failures to close are returned.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.StopAccepting()
	m.mu.Lock()
	servers := m.servers
	m.servers = map[uint32]*server{}
	m.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, 0, len(servers))
	var mu sync.Mutex
	for _, s := range servers {
		wg.Go(func() {
			err := s.shutdown(ctx)
			if ctx.Err() != nil && isContextErr(err) {
				err = nil
			}
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		})
	}
	wg.Wait()
	drained := make(chan struct{})
	go func() {
		m.draining.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-ctx.Done():
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("shut down listeners: %w", err)
	}
	return nil
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
