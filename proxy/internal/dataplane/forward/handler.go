package forward

import (
	"context"
	"crypto/tls"
	"math/rand/v2"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"coxswain.dev/coxswain/discovery/tracing"
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
	// MaxMirrorBodySize is the largest request body copied to mirrors; a request with a larger
	// or unknown body is forwarded but not mirrored. 64 KiB when zero.
	MaxMirrorBodySize int64
	// MaxRetryBodySize is the largest request body of a request that may be retried; it is
	// read whole before the first attempt. A larger or unknown body is forwarded once.
	// DefaultMaxRetryBodySize when zero.
	MaxRetryBodySize int64
	// MaxBufferedBodyBytes bounds the retry and mirror bodies held in memory by the whole
	// proxy; a body that does not fit is forwarded once and not mirrored.
	// DefaultMaxBufferedBodyBytes when zero.
	MaxBufferedBodyBytes int64
	// MaxRequestBodySize bounds a request body; 413 beyond it. Zero or negative is no bound:
	// bodies stream, so their size costs no memory.
	MaxRequestBodySize int64
	// MaxRequestsPerConnection bounds the requests of one downstream connection; the last
	// one's response closes it. DefaultMaxRequestsPerConnection when zero.
	MaxRequestsPerConnection int
	// MaxHeaderCount bounds the header fields of a request; 431 beyond it. 100 when zero.
	MaxHeaderCount int
	// MaxHeaderBytes bounds the size of a request's header fields; 431 beyond it. 32 KiB when
	// zero. The listener's HTTP engine refuses headers far beyond it before they arrive here.
	MaxHeaderBytes int
	// BodyReadTimeout bounds the wait for each read of a request body; 408 when it passes
	// before a response started. 60s when zero.
	BodyReadTimeout time.Duration
	// SendTimeout bounds the wait for each write of a response to the client; the stream or
	// connection is reset when it passes. 60s when zero.
	SendTimeout time.Duration
	// BackendIdleTimeout bounds the wait for each read of a response body from a backend once
	// its header arrived; 60s when zero.
	BackendIdleTimeout time.Duration
	// TunnelIdleTimeout closes a WebSocket tunnel when neither side sent anything for this
	// long; 5m when zero.
	TunnelIdleTimeout time.Duration
	// RequestIDHeader is the field that carries each request's ID to the backend (and into the
	// access log): the client's when it is valid (ValidRequestID), a new one otherwise.
	// DefaultRequestIDHeader when empty.
	RequestIDHeader string
	// NoRequestID turns request IDs off: the client's field goes to the backend unchecked and
	// none is generated.
	NoRequestID bool
	// AllowUnderscoresInHeaders forwards request fields whose names hold an underscore, which
	// are dropped otherwise (see dropUnderscoreFields).
	AllowUnderscoresInHeaders bool
	// ReplaceRequestID generates a new ID for every request, whatever the client sent.
	ReplaceRequestID bool
	// AccessLog, when set, gets one entry per request.
	AccessLog *accesslog.Logger
	// Tracer, when set, gives each request a server span and its backend the span's trace
	// context. Without it nothing of tracing runs: the client's traceparent and tracestate go
	// to the backend as they came.
	Tracer *tracing.Tracer
	// Metrics, when set, count requests.
	Metrics *metrics.Metrics
	// Overloaded says the proxy is over its memory watermark: new requests are answered 503
	// and their connections closed. Never when nil.
	Overloaded func() bool
	// Rand returns uniformly random numbers for weighted choice and mirror sampling;
	// math/rand/v2 when nil. Tests seed it.
	Rand func() uint64
}

// Defaults of the request limits, which the proxy's flags show.
const (
	DefaultMaxHeaderCount = 100
	// DefaultMaxRequestsPerConnection is the requests one downstream connection may make.
	DefaultMaxRequestsPerConnection = 10000
	DefaultMaxHeaderBytes           = 32 << 10
	DefaultBodyReadTimeout          = 60 * time.Second
	DefaultSendTimeout              = 60 * time.Second
	DefaultBackendIdleTimeout       = 60 * time.Second
	DefaultTunnelIdleTimeout        = 5 * time.Minute
	// DefaultMaxBufferedBodyBytes is the proxy-wide memory for buffered retry and mirror
	// bodies: 512 retried 64 KiB bodies at once.
	DefaultMaxBufferedBodyBytes = 32 << 20
)

func (o *Options) defaults() {
	setDefault(&o.MirrorConcurrency, 64)
	setDefault(&o.MirrorTimeout, 10*time.Second)
	setDefault(&o.MaxMirrorBodySize, 64<<10)
	setDefault(&o.MaxRetryBodySize, DefaultMaxRetryBodySize)
	setDefault(&o.MaxBufferedBodyBytes, DefaultMaxBufferedBodyBytes)
	setDefault(&o.MaxHeaderCount, DefaultMaxHeaderCount)
	setDefault(&o.MaxRequestsPerConnection, DefaultMaxRequestsPerConnection)
	setDefault(&o.MaxHeaderBytes, DefaultMaxHeaderBytes)
	setDefault(&o.BodyReadTimeout, DefaultBodyReadTimeout)
	setDefault(&o.SendTimeout, DefaultSendTimeout)
	setDefault(&o.BackendIdleTimeout, DefaultBackendIdleTimeout)
	setDefault(&o.TunnelIdleTimeout, DefaultTunnelIdleTimeout)
	if o.Rand == nil {
		o.Rand = rand.Uint64
	}
	switch {
	case o.NoRequestID:
		o.RequestIDHeader = ""
	case o.RequestIDHeader == "":
		o.RequestIDHeader = DefaultRequestIDHeader
	default:
		o.RequestIDHeader = textproto.CanonicalMIMEHeaderKey(o.RequestIDHeader)
	}
	if o.Overloaded == nil {
		o.Overloaded = func() bool { return false }
	}
}

func setDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v == 0 {
		*v = def
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
	// bgMu orders starting background work against Wait: a WaitGroup must not grow from zero
	// while it is waited on.
	bgMu     sync.Mutex
	stopping bool
	tunnels  tunnels
	bufs     sync.Pool
	// budget bounds the request bodies held in memory for retries and mirrors.
	budget bufferBudget
	// stopCtx ends the mirror exchanges still running when a drain runs out of time.
	stopCtx context.Context
	stop    context.CancelFunc
}

// bufferSize is the chunk in which bodies are copied: one buffer per direction per request.
const bufferSize = 32 << 10

// NewHandler returns a handler serving nothing until the first Swap: every request gets 404.
func NewHandler(opts Options) *Handler {
	opts.defaults()
	h := &Handler{opts: opts, mirrorSlots: make(chan struct{}, opts.MirrorConcurrency), tunnels: newTunnels()}
	h.budget.max = opts.MaxBufferedBodyBytes
	h.stopCtx, h.stop = context.WithCancel(context.Background())
	h.bufs.New = func() any { b := make([]byte, bufferSize); return &b }
	return h
}

// Swap makes s current and returns the previous state. Requests already routed finish on the
// state they started with; WebSocket tunnels whose route or port s no longer has are closed.
// s's routes get their metric handles before it is published.
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
	prev := h.state.Swap(s)
	h.tunnels.closeGone(s.Table)
	return prev
}

// Current returns the state serving now, nil before the first Swap.
func (h *Handler) Current() *State { return h.state.Load() }

// Listener says which port and scheme a request arrived on.
type Listener struct {
	Port   uint32
	Scheme string

	// portOnce makes port, the text of Port that X-Forwarded-Port carries, once for every
	// request of the listener.
	portOnce sync.Once
	port     string
}

// portText returns the listener's port as text.
func (l *Listener) portText() string {
	l.portOnce.Do(func() { l.port = strconv.FormatUint(uint64(l.Port), 10) })
	return l.port
}

// HTTP returns the handler of the requests that arrive on l, over any HTTP version.
func (h *Handler) HTTP(l *Listener) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.serve(w, r, l) })
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request, l *Listener) {
	x := exchange{h: h, w: w, r: r, listener: l, state: h.state.Load(), start: time.Now()}
	if !h.opts.AllowUnderscoresInHeaders {
		// Before anything reads the fields: the request ID, routing, the filters.
		h.opts.Metrics.DroppedFields(droppedUnderscore, dropUnderscoreFields(r.Header)+dropUnderscoreFields(r.Trailer))
	}
	x.requestID, x.requestIDValues = h.requestID(r)
	if h.opts.Tracer != nil {
		x.startSpan()
	}
	x.rc = http.NewResponseController(w)
	if r.ProtoMajor == 1 && r.ContentLength != 0 {
		// A backend's early answer (a 401 or 413 to an upload) goes out while the client is
		// still sending: the engine would otherwise read the rest of the body first.
		_ = x.rc.EnableFullDuplex()
	}
	c := connectionOf(r)
	var status int
	switch {
	case c != nil && c.flooded.Load():
		// The connection was told to go away for resetting its streams: what it still sends
		// is not forwarded.
		x.closeConn = true
		status = x.refuse(http.StatusServiceUnavailable, reasonRapidReset)
	case h.opts.Overloaded():
		// Over the memory watermark: shed the request and its connection.
		x.closeConn = true
		h.opts.Metrics.OverloadRefused("request")
		status = x.refuse(http.StatusServiceUnavailable, reasonOverloaded)
	default:
		h.countRequest(c, &x)
		status = h.answer(&x)
		h.countReset(c, &x)
	}
	h.record(&x, status)
	if x.closeConn && r.ProtoMajor == 1 {
		// What the client still sends of a request the proxy answered without reading is
		// drained only this long before the connection closes: long enough for the answer to
		// reach the client before a reset could destroy it, never until the client leaves.
		_ = x.rc.SetReadDeadline(time.Now().Add(closeLinger))
	}
	if x.abort || status == statusClientClosed && !x.wrote {
		// The response cannot be completed faithfully, or the client left before any: reset
		// the stream, or close the connection, so the client never takes a cut body for a
		// whole one, nor the engine's implicit empty answer for the backend's.
		panic(http.ErrAbortHandler)
	}
}

// closeLinger bounds the drain of a request left unread on a connection its answer closes.
const closeLinger = time.Second

// answer runs the route's action and returns the status given to the client.
func (h *Handler) answer(x *exchange) int {
	if status, reason := x.validate(); status != 0 {
		return x.refuse(status, reason)
	}
	r, misdirected := x.match()
	x.route = r
	switch {
	case misdirected:
		// The connection stays open: it still serves the listener it was negotiated for, and
		// the client retries elsewhere on a new one (RFC 9110 15.5.20, RFC 9113 9.1.2).
		return x.refuse(http.StatusMisdirectedRequest, reasonMisdirected)
	case r == nil:
		return x.fail(http.StatusNotFound)
	case r.CORS != nil && isPreflight(x.r):
		return x.preflight(r.CORS)
	case r.Redirect != nil:
		return x.redirect(r.Redirect)
	case r.DirectStatus != 0:
		return x.failBackend(r.DirectStatus)
	}
	return h.forward(x)
}

// record counts the request and writes its access log entry.
func (h *Handler) record(x *exchange, status int) {
	elapsed := time.Since(x.start)
	stats := h.opts.Metrics.Unmatched()
	if x.route != nil {
		stats, _ = x.route.Stats.(*metrics.RouteCounters)
	}
	stats.Inc(status)
	h.opts.Metrics.Observe(elapsed)
	if x.reason != "" {
		h.opts.Metrics.Refused(x.reason)
	}
	if h.opts.AccessLog != nil {
		e := x.entry(status, elapsed)
		h.opts.AccessLog.Log(&e)
	}
	if x.span != nil {
		x.endSpan(status)
	}
}

// RefusedHead records a request head that the listener's HTTP engine refused before any
// handler saw it: the refusal metric, and an access log entry with what is known of it (the
// client, the connection's TLS, the status and reason, a request ID of its own).
func (h *Handler) RefusedHead(reason string, status int, remoteAddr string, state *tls.ConnectionState) {
	h.opts.Metrics.Refused(reason)
	if h.opts.AccessLog == nil {
		return
	}
	e := accesslog.Entry{
		Start: time.Now(), ClientAddr: remoteAddr, Protocol: "HTTP/1.1", Status: status, Reason: reason,
	}
	if h.opts.RequestIDHeader != "" {
		e.RequestID = NewRequestID()
	}
	if state != nil {
		e.TLSVersion, e.SNI = state.Version, state.ServerName
	}
	h.opts.AccessLog.Log(&e)
}

// stopGrace bounds the wait for background work once Wait closed and cancelled it.
const stopGrace = time.Second

// Wait blocks until the mirror copies and WebSocket tunnels still running end, or until done is
// closed, when it closes the tunnels, cancels the mirror exchanges and waits at most stopGrace
// for them to return. It reports whether every background task ended.
func (h *Handler) Wait(done <-chan struct{}) bool {
	h.bgMu.Lock()
	h.stopping = true
	h.bgMu.Unlock()
	finished := make(chan struct{})
	go func() {
		h.background.Wait()
		close(finished)
	}()
	select {
	case <-finished:
		h.stop()
		return true
	case <-done:
	}
	h.stop()
	h.tunnels.closeAll()
	t := time.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case <-finished:
		return true
	case <-t.C:
		return false
	}
}

// track counts one more background task (a mirror copy, a tunnel), unless the handler is
// shutting down, when it returns false and the task must not start.
func (h *Handler) track() bool {
	h.bgMu.Lock()
	defer h.bgMu.Unlock()
	if h.stopping {
		return false
	}
	h.background.Add(1)
	return true
}

// BufferedBodyBytes returns the memory held in buffered retry and mirror bodies.
func (h *Handler) BufferedBodyBytes() float64 { return float64(h.budget.used.Load()) }

func (h *Handler) buffer() *[]byte   { return h.bufs.Get().(*[]byte) }
func (h *Handler) release(b *[]byte) { h.bufs.Put(b) }

// Rapid reset (CVE-2023-44487): a connection whose client reset at least resetFloodMin of its
// streams before their response, and most of them, is told to go away (HTTP/2 GOAWAY, or
// Connection: close) and nothing more of it is forwarded.
const resetFloodMin = 32

const (
	reasonRapidReset = "rapid_reset"
	reasonOverloaded = "overloaded"
)

// connection is what the handler counts of one downstream connection.
type connection struct {
	requests atomic.Int64
	resets   atomic.Int64
	flooded  atomic.Bool
}

type connectionKey struct{}

// WithConnection returns the context of a new downstream connection (http.Server.ConnContext),
// in which the handler counts the connection's requests and early resets.
func WithConnection(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, connectionKey{}, &connection{})
}

func connectionOf(r *http.Request) *connection {
	c, _ := r.Context().Value(connectionKey{}).(*connection)
	return c
}

// countRequest counts one more request of c; the request that reaches
// MaxRequestsPerConnection, and any after it, closes the connection after its response.
func (h *Handler) countRequest(c *connection, x *exchange) {
	if c == nil {
		return
	}
	n := c.requests.Add(1)
	if n < int64(h.opts.MaxRequestsPerConnection) {
		return
	}
	x.closeConn = true
	if n == int64(h.opts.MaxRequestsPerConnection) {
		h.opts.Metrics.ConnectionClosed("max_requests")
	}
}

// countReset counts a request whose client went away before any response, and tells the
// connection to go away once such requests are most of its requests.
func (h *Handler) countReset(c *connection, x *exchange) {
	if c == nil || x.wrote || x.r.Context().Err() == nil {
		return
	}
	resets := c.resets.Add(1)
	if resets < resetFloodMin || 2*resets < c.requests.Load() {
		return
	}
	x.w.Header()[headerConnection] = []string{"close"} // sent with the reset stream's header: GOAWAY
	if c.flooded.CompareAndSwap(false, true) {
		h.opts.Metrics.ConnectionClosed(reasonRapidReset)
	}
}
