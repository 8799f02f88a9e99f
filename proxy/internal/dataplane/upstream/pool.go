package upstream

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"coxswain.dev/coxswain/proxy/internal/dataplane/h1client"
	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
)

// Options bound the upstream connections.
type Options struct {
	// MaxConnsPerEndpoint bounds the requests in flight to one endpoint (for HTTP/1.1 one
	// busy connection each); more wait for a place. DefaultMaxConnsPerEndpoint when zero.
	MaxConnsPerEndpoint int
	// MaxPendingPerEndpoint bounds the requests waiting for a place on one endpoint; one more
	// is refused at once. DefaultMaxPendingPerEndpoint when zero.
	MaxPendingPerEndpoint int
	// PendingTimeout bounds the wait for a place; DefaultPendingTimeout when zero.
	PendingTimeout time.Duration
	// RetryBudgetMinPerSecond is the floor of a cluster's retry budget: the retries a second
	// it may make beyond those its requests earned; DefaultRetryBudgetMinPerSecond when zero.
	RetryBudgetMinPerSecond int
	// ClientSharePercent is the share of an endpoint's places one client (source address)
	// may hold or wait for; DefaultClientSharePercent when zero.
	ClientSharePercent int
	// MaxIdleConnsPerEndpoint bounds the idle keep-alive connections kept per endpoint; 256
	// when zero.
	MaxIdleConnsPerEndpoint int
	// MaxIdleConnDuration closes a connection idle this long; 60s when zero.
	MaxIdleConnDuration time.Duration
	// DialTimeout bounds connecting; 5s when zero.
	DialTimeout time.Duration
	// FirstByteTimeout bounds the wait for a response's header once the request was written,
	// on exchanges without a route timeout; 60s when zero, negative for none.
	FirstByteTimeout time.Duration
	// MaxResponseHeaderBytes bounds a response's header; 64 KiB when zero.
	MaxResponseHeaderBytes int64
	// BufferSize is the read and write buffer of one upstream connection; 32 KiB when zero.
	BufferSize int
	// ReuseQuarantine is how long an HTTP/1.1 connection rests after an answer before it
	// carries another request, so that bytes a backend writes past the answer's framing show
	// before then; h1client.DefaultReuseQuarantine when zero, negative for none. The native
	// engine takes another connection meanwhile; Go's Transport, which picks the connection
	// itself, waits for the rest of it.
	ReuseQuarantine time.Duration
	// Engine speaks HTTP/1.1 to the endpoints; http1.DefaultEngine when empty. HTTP/2 (h2c and
	// over TLS) is Go's Transport either way.
	Engine http1.Engine
}

// Defaults of the endpoint limits, which the proxy's flags show.
const (
	DefaultMaxConnsPerEndpoint   = 1024
	DefaultMaxPendingPerEndpoint = 1024
	DefaultPendingTimeout        = 5 * time.Second
	DefaultClientSharePercent    = 50
)

func (o *Options) defaults() {
	if o.Engine == "" {
		o.Engine = http1.DefaultEngine
	}
	if o.MaxConnsPerEndpoint == 0 {
		o.MaxConnsPerEndpoint = DefaultMaxConnsPerEndpoint
	}
	if o.MaxPendingPerEndpoint == 0 {
		o.MaxPendingPerEndpoint = DefaultMaxPendingPerEndpoint
	}
	if o.PendingTimeout == 0 {
		o.PendingTimeout = DefaultPendingTimeout
	}
	if o.ClientSharePercent == 0 {
		o.ClientSharePercent = DefaultClientSharePercent
	}
	if o.RetryBudgetMinPerSecond == 0 {
		o.RetryBudgetMinPerSecond = DefaultRetryBudgetMinPerSecond
	}
	if o.MaxIdleConnsPerEndpoint == 0 {
		o.MaxIdleConnsPerEndpoint = 256
	}
	if o.MaxIdleConnDuration == 0 {
		o.MaxIdleConnDuration = 60 * time.Second
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.FirstByteTimeout == 0 {
		o.FirstByteTimeout = 60 * time.Second
	}
	if o.FirstByteTimeout < 0 {
		o.FirstByteTimeout = 0
	}
	if o.MaxResponseHeaderBytes == 0 {
		o.MaxResponseHeaderBytes = 64 << 10
	}
	if o.BufferSize == 0 {
		o.BufferSize = 32 << 10
	}
	if o.ReuseQuarantine == 0 {
		o.ReuseQuarantine = h1client.DefaultReuseQuarantine
	}
}

// Pool owns the endpoint transports. Build and Retire are called from one goroutine at a time
// (the data plane's Apply); the transports it hands out are safe for concurrent use.
type Pool struct {
	opts    Options
	mu      sync.Mutex
	clients map[string]*Endpoint
	// pending counts the requests waiting for a place on any endpoint.
	pending atomic.Int64
}

// Pending returns the requests waiting for a place on an endpoint, for the metrics.
func (p *Pool) Pending() float64 { return float64(p.pending.Load()) }

// NewPool returns an empty pool.
func NewPool(opts Options) *Pool {
	opts.defaults()
	return &Pool{opts: opts, clients: map[string]*Endpoint{}}
}

// Endpoint is one backend address with its connection pools.
type Endpoint struct {
	Address string
	// HTTP1 speaks HTTP/1.1 to the endpoint: Go's Transport with guarded connections, or with
	// the native engine an h1client.Transport. It frames every request from the request's
	// fields (method, target, Host, ContentLength, headers it does not own) and retries only a
	// request whose reused connection ended before any byte of an answer (the forwarder's
	// GetConn hook decides whether that attempt goes). Nil for an endpoint of a cluster with
	// backend TLS.
	HTTP1 http.RoundTripper
	// TLS speaks HTTP/1.1 or HTTP/2 over TLS to the endpoint of a cluster with backend TLS
	// (HTTP/1.1 with the native engine's client, HTTP/2 always with Go's Transport); nil
	// otherwise.
	TLS  http.RoundTripper
	h2c  atomic.Pointer[http.Transport]
	opts *Options
	// limit admits the requests in flight to the endpoint, over every transport.
	limit *limiter
	// key is the endpoint's key in Pool.clients: its address, with the TLS settings' key for
	// an endpoint of a cluster with backend TLS.
	key string
	// users counts the clusters of built sets that hold the endpoint; guarded by Pool.mu.
	users int
}

// Set is the clusters of one routing table, indexed like Table.Clusters.
type Set struct {
	clusters []*Cluster
	// from holds the compiled cluster each cluster was built from.
	from []*router.Cluster
}

// Cluster hands out its endpoints round-robin.
type Cluster struct {
	Name string
	H2C  bool
	// TLS says requests go to the endpoints over TLS (https); H2 that they are HTTP/2 there.
	TLS bool
	H2  bool
	// FailClosed says the cluster's backend TLS policy cannot be met: it must answer without
	// dialing.
	FailClosed bool
	// Budget bounds the retries to the cluster.
	Budget    RetryBudget
	endpoints []*Endpoint
	next      atomic.Uint32
}

// Build returns the clusters of table. A cluster prev (nil for none) built from the same
// compiled cluster, which a table Update derived shares with its predecessor, is shared with
// its round-robin position; the others are built, reusing the pool's transports for every
// endpoint address already known. Every Build is followed by one Retire(prev, built) once the
// set serves.
func (p *Pool) Build(prev *Set, table *router.Table) *Set {
	p.mu.Lock()
	defer p.mu.Unlock()
	rcs := table.Clusters()
	s := &Set{clusters: make([]*Cluster, len(rcs)), from: rcs}
	for i, rc := range rcs {
		switch {
		case rc == nil:
		case prev != nil && i < len(prev.from) && prev.from[i] == rc:
			s.clusters[i] = prev.clusters[i]
		default:
			s.clusters[i] = p.build(rc)
		}
	}
	return s
}

// build returns the cluster of rc, with the pool's endpoints. A fail-closed cluster gets none.
func (p *Pool) build(rc *router.Cluster) *Cluster {
	c := &Cluster{Name: rc.Name, H2C: rc.H2C, endpoints: make([]*Endpoint, 0, len(rc.Endpoints))}
	c.Budget.floorEvery = time.Second / time.Duration(p.opts.RetryBudgetMinPerSecond)
	if rc.TLS != nil {
		c.TLS, c.H2, c.FailClosed = true, rc.TLS.HTTP2, rc.TLS.FailClosed
	}
	for _, ep := range rc.Endpoints {
		switch {
		case c.FailClosed:
			return c
		case rc.TLS != nil:
			c.endpoints = append(c.endpoints, p.tlsEndpoint(ep.Address, rc.TLS))
		default:
			c.endpoints = append(c.endpoints, p.endpoint(ep.Address))
		}
	}
	return c
}

func (p *Pool) endpoint(addr string) *Endpoint {
	if ep, ok := p.clients[addr]; ok {
		return ep
	}
	ep := &Endpoint{Address: addr, opts: &p.opts, key: addr, limit: newLimiter(&p.opts, &p.pending)}
	if p.opts.Engine == http1.EngineNative {
		ep.HTTP1 = ep.native(nil)
	} else {
		ep.HTTP1 = ep.guarded(nil)
	}
	p.clients[addr] = ep
	return ep
}

// tlsEndpoint returns the endpoint of addr for clusters with the TLS settings t: endpoints are
// shared only between equal settings, so a connection verified for one policy never carries
// another's requests.
func (p *Pool) tlsEndpoint(addr string, t *router.BackendTLS) *Endpoint {
	key := "tls/" + t.Key + "/" + addr
	if ep, ok := p.clients[key]; ok {
		return ep
	}
	ep := &Endpoint{Address: addr, opts: &p.opts, key: key, limit: newLimiter(&p.opts, &p.pending)}
	p.clients[key] = ep
	switch {
	case !t.HTTP2 && p.opts.Engine == http1.EngineNative:
		ep.TLS = ep.native(t.Config)
		return ep
	case !t.HTTP2:
		ep.TLS = ep.guarded(t.Config)
		return ep
	}
	var protocols http.Protocols
	protocols.SetHTTP2(true)
	tr := ep.transport(&protocols)
	tr.TLSClientConfig = t.Config
	tr.TLSHandshakeTimeout = p.opts.DialTimeout
	ep.TLS = tr
	return ep
}

// transport returns a transport whose every connection goes to the endpoint's address,
// whatever the request URL says. Endpoints are addresses, so there is no DNS and no proxy
// from the environment; compression is the client's and the backend's business. The transport
// has no connection bound of its own, whose queue has no deadline: the endpoint's limiter
// admits every request before it reaches the transport.
func (ep *Endpoint) transport(protocols *http.Protocols) *http.Transport {
	o := ep.opts
	dialer := &net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Protocols: protocols,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, ep.Address)
		},
		MaxIdleConns:           o.MaxIdleConnsPerEndpoint,
		MaxIdleConnsPerHost:    o.MaxIdleConnsPerEndpoint,
		IdleConnTimeout:        o.MaxIdleConnDuration,
		ResponseHeaderTimeout:  o.FirstByteTimeout,
		MaxResponseHeaderBytes: o.MaxResponseHeaderBytes,
		ReadBufferSize:         o.BufferSize,
		WriteBufferSize:        o.BufferSize,
		DisableCompression:     true,
	}
}

// guarded returns Go's Transport speaking HTTP/1.1 to the endpoint, over TLS with cfg when it
// is not nil, with its connections guarded as the native engine's are.
func (ep *Endpoint) guarded(cfg *tls.Config) *guarded {
	o := ep.opts
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	tr := ep.transport(&protocols)
	tr.TLSClientConfig = cfg // what the endpoint's TLS settings are; guarded's dialer uses them
	dialer := &net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}
	return newGuarded(tr, dialer, ep.Address, cfg, o.DialTimeout, max(o.ReuseQuarantine, 0))
}

// native returns the native engine's HTTP/1.1 client to the endpoint, over TLS with cfg when
// it is not nil, bounded by the same options as Go's Transport.
func (ep *Endpoint) native(cfg *tls.Config) *h1client.Transport {
	o := ep.opts
	return h1client.New(h1client.Options{
		Address:          ep.Address,
		TLS:              cfg,
		MaxIdleConns:     o.MaxIdleConnsPerEndpoint,
		IdleTimeout:      o.MaxIdleConnDuration,
		DialTimeout:      o.DialTimeout,
		FirstByteTimeout: o.FirstByteTimeout,
		MaxHeaderBytes:   int(o.MaxResponseHeaderBytes),
		BufferSize:       o.BufferSize,
		ReuseQuarantine:  o.ReuseQuarantine,
	})
}

// H2C returns the endpoint's HTTP/2 cleartext transport, created on first use: one
// multiplexed connection carries every request to the endpoint.
func (ep *Endpoint) H2C() *http.Transport {
	if t := ep.h2c.Load(); t != nil {
		return t
	}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	t := ep.transport(&protocols)
	if !ep.h2c.CompareAndSwap(nil, t) {
		return ep.h2c.Load()
	}
	return t
}

// Retire forgets the clusters of prev (nil for none) that current, built from prev, does not
// share, and closes the idle connections of every endpoint no cluster holds any more and
// forgets it; requests still running on such an endpoint finish on their connection.
func (p *Pool) Retire(prev, current *Set) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, c := range current.clusters {
		if c != nil && (prev == nil || i >= len(prev.clusters) || prev.clusters[i] != c) {
			for _, ep := range c.endpoints {
				ep.users++
			}
		}
	}
	if prev == nil {
		return
	}
	for i, c := range prev.clusters {
		if c == nil || i < len(current.clusters) && current.clusters[i] == c {
			continue
		}
		for _, ep := range c.endpoints {
			if ep.users--; ep.users == 0 {
				ep.close()
				delete(p.clients, ep.key)
			}
		}
	}
}

// Close closes the idle connections of every endpoint.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, ep := range p.clients {
		ep.close()
		delete(p.clients, addr)
	}
}

func (ep *Endpoint) close() {
	for _, t := range []http.RoundTripper{ep.HTTP1, ep.TLS} {
		if c, ok := t.(interface{ CloseIdleConnections() }); ok {
			c.CloseIdleConnections()
		}
	}
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

// Scheme returns the scheme of requests to the cluster: https with backend TLS, http otherwise.
func (c *Cluster) Scheme() string {
	if c.TLS {
		return "https"
	}
	return "http"
}

// Transport returns the transport that speaks the cluster's protocol to ep.
func (c *Cluster) Transport(ep *Endpoint) http.RoundTripper {
	switch {
	case ep.TLS != nil:
		return ep.TLS
	case c.H2C:
		return ep.H2C()
	}
	return ep.HTTP1
}

// Len returns the number of endpoints.
func (c *Cluster) Len() int { return len(c.endpoints) }

// Retry budget, per cluster and proxy, as Finagle's and Linkerd's by rate and Envoy's by
// concurrency: every request earns a fifth of a retry (at most retryTokenCap retries are kept),
// and a retry spends one, or else one of the floor's RetryBudgetMinPerSecond retries a second,
// whose bucket holds RetryBudgetFloorWindow of them; besides, the retries in flight may be at
// most RetryBudgetPercent of the requests in flight, and at least RetryBudgetMin. A cluster in
// trouble therefore gets at most a fifth more attempts than it gets requests, plus the floor,
// and a quiet one at most the floor a second once the bucket's burst is spent.
const (
	RetryBudgetPercent = 20
	RetryBudgetMin     = 3
	// DefaultRetryBudgetMinPerSecond is the floor of retries a second of one cluster: Finagle's
	// and Linkerd's default. A lower floor starves a client that retries every request of a
	// quiet route (three a second refused the Gateway API conformance suite's retry tests,
	// which send a few requests a second, each needing two retries).
	DefaultRetryBudgetMinPerSecond = 10
	// RetryBudgetFloorWindow is how many seconds of the floor its bucket holds, so a burst of
	// failures after a quiet spell may take that many retries at once: the 10 s time to live of
	// Finagle's and Linkerd's deposits.
	RetryBudgetFloorWindow = 10 * time.Second
	retryTokenCap          = 100
)

// milli is one retry in the budget's token count.
const milli = 1000

// RetryBudget counts a cluster's requests and retries in flight and the retries its requests
// earned. The zero value is ready, with the default floor.
type RetryBudget struct {
	requests atomic.Int64
	retries  atomic.Int64
	// tokens are the retries earned, in thousandths.
	tokens atomic.Int64
	// nextFloor is when the floor's bucket would be full again, in Unix nanoseconds.
	nextFloor atomic.Int64
	// floorEvery is the time between two retries of the floor; a second divided by
	// DefaultRetryBudgetMinPerSecond when zero.
	floorEvery time.Duration
	// floorWindow is how long a floor's worth of retries the bucket holds;
	// RetryBudgetFloorWindow when zero.
	floorWindow time.Duration
}

// Begin counts a request to the cluster in flight until End, and earns its share of a retry.
func (b *RetryBudget) Begin() {
	b.requests.Add(1)
	if b.tokens.Load() < retryTokenCap*milli {
		b.tokens.Add(RetryBudgetPercent * milli / 100)
	}
}

// End ends what Begin counted.
func (b *RetryBudget) End() { b.requests.Add(-1) }

// Acquire takes one retry from the budget and reports whether there was one; a true answer
// is followed by one Release once the retry's attempt is over. A retry after a connection
// that could not be made (refused, unreachable: the endpoint got nothing) spends nothing of
// the rate, only a place among the retries in flight, so a quiet cluster with a dead endpoint
// still goes to the next one.
func (b *RetryBudget) Acquire(connectFailed bool) bool {
	allowed := max(RetryBudgetMin, b.requests.Load()*RetryBudgetPercent/100)
	if b.retries.Add(1) > allowed {
		b.retries.Add(-1)
		return false
	}
	if connectFailed || b.spendToken() || b.spendFloor(time.Now()) {
		return true
	}
	b.retries.Add(-1)
	return false
}

func (b *RetryBudget) spendToken() bool {
	for {
		t := b.tokens.Load()
		if t < milli {
			return false
		}
		if b.tokens.CompareAndSwap(t, t-milli) {
			return true
		}
	}
}

// spendFloor takes a retry of the floor, a bucket of floorWindow's retries refilled at its
// rate (the generic cell rate algorithm: nextFloor is when the bucket would be full again).
func (b *RetryBudget) spendFloor(now time.Time) bool {
	every := b.floorEvery
	if every == 0 {
		every = time.Second / DefaultRetryBudgetMinPerSecond
	}
	window := b.floorWindow
	if window == 0 {
		window = RetryBudgetFloorWindow
	}
	t := now.UnixNano()
	for {
		full := b.nextFloor.Load()
		if full-t > int64(window)-int64(every) {
			return false // the bucket is empty
		}
		if b.nextFloor.CompareAndSwap(full, max(full, t)+int64(every)) {
			return true
		}
	}
}

// Release returns a retry Acquire took.
func (b *RetryBudget) Release() { b.retries.Add(-1) }
