package forward

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"coxswain.dev/coxswain/proxy/internal/dataplane/accesslog"
	"coxswain.dev/coxswain/proxy/internal/dataplane/metrics"
	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
	"coxswain.dev/coxswain/proxy/internal/dataplane/upstream"
)

// Options tune the request path. Zero values take the defaults.
type Options struct {
	// MirrorConcurrency bounds the mirror copies in flight; more are dropped. 64 when zero.
	MirrorConcurrency int
	// MirrorTimeout bounds one mirror exchange; 10s when zero.
	MirrorTimeout time.Duration
	// DialTimeout bounds connecting a WebSocket tunnel; 5s when zero.
	DialTimeout time.Duration
	// MaxResponseBodySize bounds an h2c response body; 64 MiB when zero.
	MaxResponseBodySize int64
	// AccessLog, when set, gets one entry per request.
	AccessLog *accesslog.Logger
	// Metrics, when set, count requests.
	Metrics *metrics.Metrics
	// Rand returns uniformly random numbers for weighted choice and mirror sampling;
	// math/rand/v2 when nil. Tests seed it.
	Rand func() uint64
}

func (o *Options) defaults() {
	if o.MirrorConcurrency == 0 {
		o.MirrorConcurrency = 64
	}
	if o.MirrorTimeout == 0 {
		o.MirrorTimeout = 10 * time.Second
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.MaxResponseBodySize == 0 {
		o.MaxResponseBodySize = 64 << 20
	}
	if o.Rand == nil {
		o.Rand = rand.Uint64
	}
}

// State is what one applied resource set serves: its table and the clusters built for it.
type State struct {
	Table     *router.Table
	Upstreams *upstream.Set
}

// Handler serves requests from the State swapped in last. Its methods are safe for concurrent
// use.
type Handler struct {
	opts        Options
	state       atomic.Pointer[State]
	mirrorSlots chan struct{}
	background  sync.WaitGroup
	tunnels     tunnels
}

// NewHandler returns a handler serving nothing until the first Swap: every request gets 404.
func NewHandler(opts Options) *Handler {
	opts.defaults()
	return &Handler{opts: opts, mirrorSlots: make(chan struct{}, opts.MirrorConcurrency), tunnels: newTunnels()}
}

// Swap makes s current and returns the previous state. Requests already routed finish on the
// state they started with. s's routes get their metric handles before it is published.
func (h *Handler) Swap(s *State) *State {
	for _, p := range s.Table.Ports() {
		for _, vh := range p.VirtualHosts() {
			for _, r := range vh.Routes() {
				if r.Stats == nil {
					r.Stats = h.opts.Metrics.Route(r.Name)
				}
			}
		}
	}
	return h.state.Swap(s)
}

// Current returns the state serving now, nil before the first Swap.
func (h *Handler) Current() *State { return h.state.Load() }

// Listener says which port and scheme a request arrived on.
type Listener struct {
	Port   uint32
	Scheme string
}

// Serve answers one request that arrived on l.
func (h *Handler) Serve(ctx *fasthttp.RequestCtx, l *Listener) { h.ServeFrom(ctx, l, nil) }

// ServeFrom is Serve for a connection whose client address, as X-Forwarded-For shows it, is
// already known: clientIP, when not nil.
func (h *Handler) ServeFrom(ctx *fasthttp.RequestCtx, l *Listener, clientIP []byte) {
	x := exchange{ctx: ctx, listener: l, state: h.state.Load(), clientIP: clientIP}
	if h.opts.AccessLog != nil {
		x.keepRequestLine()
	}
	x.route = x.match()
	status := h.answer(&x)
	h.record(&x, status)
}

// answer runs the route's action and returns the status given to the client.
func (h *Handler) answer(x *exchange) int {
	r := x.route
	switch {
	case r == nil:
		return x.fail(fasthttp.StatusNotFound)
	case r.Redirect != nil:
		return x.redirect(r.Redirect)
	case r.DirectStatus != 0:
		return x.fail(r.DirectStatus)
	}
	return h.forward(x)
}

// record counts the request and writes its access log entry.
func (h *Handler) record(x *exchange, status int) {
	elapsed := time.Since(x.ctx.Time())
	stats := h.opts.Metrics.Unmatched()
	if x.route != nil {
		stats, _ = x.route.Stats.(*metrics.RouteCounters)
	}
	stats.Inc(status)
	h.opts.Metrics.Observe(elapsed)
	if h.opts.AccessLog != nil {
		e := x.entry(status, elapsed)
		h.opts.AccessLog.Log(&e)
	}
}

// Wait blocks until the mirror copies and WebSocket tunnels still running end, or until done is
// closed, when it closes the tunnels and returns.
func (h *Handler) Wait(done <-chan struct{}) {
	finished := make(chan struct{})
	go func() {
		h.background.Wait()
		close(finished)
	}()
	select {
	case <-finished:
	case <-done:
		h.tunnels.closeAll()
		<-finished
	}
}
