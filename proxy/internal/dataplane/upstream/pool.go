package upstream

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
)

// Options bound the upstream connections.
type Options struct {
	// MaxConnsPerEndpoint bounds the connections to one endpoint; 1024 when zero.
	MaxConnsPerEndpoint int
	// MaxIdleConnDuration closes a connection idle this long; 60s when zero.
	MaxIdleConnDuration time.Duration
	// DialTimeout bounds connecting; 5s when zero.
	DialTimeout time.Duration
	// ConnWaitTimeout is how long a request waits for a free connection when all are busy;
	// 2s when zero.
	ConnWaitTimeout time.Duration
	// ReadBufferSize bounds the response header size; 16 KiB when zero.
	ReadBufferSize int
	// WriteBufferSize is the request write buffer; 32 KiB when zero.
	WriteBufferSize int
	// FirstByteTimeout bounds the wait for the first byte of a response on exchanges without a
	// deadline of their own, to within an eighth of itself; 60s when zero, negative for none.
	FirstByteTimeout time.Duration
}

func (o *Options) defaults() {
	if o.MaxConnsPerEndpoint == 0 {
		o.MaxConnsPerEndpoint = 1024
	}
	if o.MaxIdleConnDuration == 0 {
		o.MaxIdleConnDuration = 60 * time.Second
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.ConnWaitTimeout == 0 {
		o.ConnWaitTimeout = 2 * time.Second
	}
	if o.ReadBufferSize == 0 {
		o.ReadBufferSize = 16 << 10
	}
	if o.WriteBufferSize == 0 {
		o.WriteBufferSize = 32 << 10
	}
	if o.FirstByteTimeout == 0 {
		o.FirstByteTimeout = 60 * time.Second
	}
}

// Pool owns the endpoint clients. Build and Retire are called from one goroutine at a time
// (the data plane's Apply); the clients it hands out are safe for concurrent use.
type Pool struct {
	opts     Options
	watchdog *watchdog
	mu       sync.Mutex
	clients  map[string]*Endpoint
}

// NewPool returns an empty pool. Close stops its watchdog.
func NewPool(opts Options) *Pool {
	opts.defaults()
	p := &Pool{opts: opts, clients: map[string]*Endpoint{}}
	if opts.FirstByteTimeout > 0 {
		p.watchdog = newWatchdog(opts.FirstByteTimeout)
	}
	return p
}

// Endpoint is one backend address with its connection pools.
type Endpoint struct {
	Address string
	HTTP1   *fasthttp.HostClient
	h2c     atomic.Pointer[http.Transport]
	opts    *Options
}

// Set is the clusters of one routing table, indexed like Table.Clusters.
type Set struct {
	clusters []*Cluster
}

// Cluster hands out its endpoints round-robin.
type Cluster struct {
	Name      string
	H2C       bool
	endpoints []*Endpoint
	next      atomic.Uint32
}

// Build returns the clusters of table, reusing the pool's client for every endpoint address
// already known.
func (p *Pool) Build(table *router.Table) *Set {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := &Set{clusters: make([]*Cluster, len(table.Clusters()))}
	for i, rc := range table.Clusters() {
		c := &Cluster{Name: rc.Name, H2C: rc.H2C, endpoints: make([]*Endpoint, 0, len(rc.Endpoints))}
		for _, ep := range rc.Endpoints {
			c.endpoints = append(c.endpoints, p.endpoint(ep.Address))
		}
		s.clusters[i] = c
	}
	return s
}

func (p *Pool) endpoint(addr string) *Endpoint {
	if ep, ok := p.clients[addr]; ok {
		return ep
	}
	o := &p.opts
	dialer := &net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}
	ep := &Endpoint{Address: addr, opts: o, HTTP1: &fasthttp.HostClient{
		Addr:                     addr,
		NoDefaultUserAgentHeader: true,
		MaxConns:                 o.MaxConnsPerEndpoint,
		MaxIdleConnDuration:      o.MaxIdleConnDuration,
		MaxConnWaitTimeout:       o.ConnWaitTimeout,
		ReadBufferSize:           o.ReadBufferSize,
		WriteBufferSize:          o.WriteBufferSize,
		// Endpoints are addresses, so the dialer needs no DNS cache.
		Dial:                      p.dial(dialer),
		MaxIdemponentCallAttempts: 2,
		RetryIfErr:                retryIfErr,
	}}
	p.clients[addr] = ep
	return ep
}

func (p *Pool) dial(dialer *net.Dialer) fasthttp.DialFunc {
	w := p.watchdog
	return func(addr string) (net.Conn, error) {
		c, err := dialer.DialContext(context.Background(), "tcp", addr)
		if err != nil || w == nil {
			return c, err
		}
		return w.watch(c), nil
	}
}

// retryIfErr retries an idempotent request once on a fresh connection when a kept-alive one
// failed, but never after a timeout: the backend had its chance.
func retryIfErr(req *fasthttp.Request, _ int, err error) (resetTimeout, retry bool) {
	var t interface{ Timeout() bool }
	if errors.Is(err, fasthttp.ErrTimeout) || errors.As(err, &t) && t.Timeout() {
		return false, false
	}
	return false, req.Header.IsGet() || req.Header.IsHead() || req.Header.IsPut() || req.Header.IsDelete() ||
		req.Header.IsOptions() || req.Header.IsTrace()
}

// Retire closes the idle connections of every endpoint that current no longer uses and forgets
// it; requests still running on such an endpoint finish on their connection.
func (p *Pool) Retire(current *Set) {
	p.mu.Lock()
	defer p.mu.Unlock()
	used := map[*Endpoint]bool{}
	for _, c := range current.clusters {
		for _, ep := range c.endpoints {
			used[ep] = true
		}
	}
	for addr, ep := range p.clients {
		if !used[ep] {
			ep.close()
			delete(p.clients, addr)
		}
	}
}

// Close closes the idle connections of every endpoint and stops the watchdog.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, ep := range p.clients {
		ep.close()
		delete(p.clients, addr)
	}
	if p.watchdog != nil {
		p.watchdog.close()
		p.watchdog = nil
	}
}

func (ep *Endpoint) close() {
	ep.HTTP1.CloseIdleConnections()
	if t := ep.h2c.Load(); t != nil {
		t.CloseIdleConnections()
	}
}

// Cluster returns the cluster at index i of the table the set was built from.
func (s *Set) Cluster(i int) *Cluster { return s.clusters[i] }

// Next returns the next endpoint round-robin, or nil when the cluster has none.
func (c *Cluster) Next() *Endpoint {
	switch len(c.endpoints) {
	case 0:
		return nil
	case 1:
		return c.endpoints[0]
	}
	return c.endpoints[(c.next.Add(1)-1)%uint32(len(c.endpoints))]
}

// Len returns the number of endpoints.
func (c *Cluster) Len() int { return len(c.endpoints) }
