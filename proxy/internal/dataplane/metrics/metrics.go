package metrics

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the data plane's collectors. A nil *Metrics records nothing.
type Metrics struct {
	requests           *prometheus.CounterVec
	duration           prometheus.Histogram
	upstreamErrors     *prometheus.CounterVec
	mirrorsDropped     prometheus.Counter
	refused            *prometheus.CounterVec
	connsRefused       prometheus.Counter
	clientConnsRefused prometheus.Counter
	retries            *prometheus.CounterVec
	bufferRefused      *prometheus.CounterVec
	droppedFields      *prometheus.CounterVec
	connsClosed        *prometheus.CounterVec
	overload           *prometheus.CounterVec
	passthrough        *prometheus.CounterVec
	passthroughBytes   *prometheus.CounterVec
	udpFlows           *prometheus.CounterVec
	unmatched          *RouteCounters
}

// New registers the data plane's metrics on reg; connections reports the number of open
// downstream connections when scraped.
func New(reg prometheus.Registerer, connections func() float64) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coxswain_proxy_requests_total",
			Help: "Requests answered, by route (empty when none matched) and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "coxswain_proxy_request_duration_seconds",
			Help:    "Time from a request's first byte to its response being handed to the connection.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coxswain_proxy_upstream_errors_total",
			Help: "Upstream exchanges that failed, by cluster and reason (connect, timeout, no_endpoints, overload).",
		}, []string{"cluster", "reason"}),
		mirrorsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coxswain_proxy_mirrors_dropped_total",
			Help: "Mirrored requests not sent because the mirror concurrency bound was reached.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coxswain_proxy_refused_requests_total",
			Help: "Requests the proxy answered itself or gave up on, by reason: a refused request, a breached limit, a failed upstream exchange, a client that left.",
		}, []string{"reason"}),
		connsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coxswain_proxy_refused_connections_total",
			Help: "Downstream connections closed on accept because the proxy's connection limit was reached.",
		}),
		clientConnsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coxswain_proxy_refused_client_connections_total",
			Help: "Downstream connections closed on accept because their client address held its share of the connection limit (--max-connections-per-client).",
		}),
	}
	m.retries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "coxswain_proxy_retries_total",
		Help: "Retry decisions of routes with a retry policy, by cluster and outcome: sent (another attempt went out), budget_exhausted (the cluster's retry budget refused it).",
	}, []string{"cluster", "outcome"})
	m.droppedFields = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "coxswain_proxy_dropped_request_fields_total",
		Help: "Request header fields and trailers the proxy dropped before routing, by reason: underscore (a name holding an underscore, unless --allow-underscores-in-headers).",
	}, []string{"reason"})
	m.bufferRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "coxswain_proxy_body_buffer_refused_total",
		Help: "Request bodies the proxy-wide buffer budget could not hold, by use: retry (the request was forwarded once), mirror (it was not mirrored).",
	}, []string{"use"})
	m.connsClosed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "coxswain_proxy_closed_connections_total",
		Help: "Downstream connections the proxy told to go away, by reason: rapid_reset (most of its streams were reset before their response), max_requests (it made --max-requests-per-connection requests).",
	}, []string{"reason"})
	m.overload = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "coxswain_proxy_overload_refused_total",
		Help: "Connections closed on accept (kind connection), requests answered 503 (kind request) and UDP flows not opened (kind udp_flow: the datagram that would have opened one was dropped) because the proxy was over its memory watermark.",
	}, []string{"kind"})
	m.passthrough = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "coxswain_proxy_passthrough_connections_total",
		Help: "Connections of TLS and TCP listeners, by route (empty when none took the connection) and outcome: forwarded, or why it was closed unforwarded (hello_timeout, hello_too_large, bad_hello, handshake_failed, no_route, no_backend, backend_unavailable, draining).",
	}, []string{"route", "outcome"})
	m.passthroughBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "coxswain_proxy_passthrough_bytes_total",
		Help: "Bytes TLS passthrough, TCP and UDP listeners forwarded, by route and direction (upstream: client to backend, a ClientHello included; downstream: backend to client).",
	}, []string{"route", "direction"})
	m.udpFlows = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "coxswain_proxy_udp_flows_total",
		Help: "Flows of UDP listeners (one per client address and port), by route (empty when none took it) and outcome: opened, or why the datagram that would have opened it was dropped (flow_limit: the proxy's limit, listener_flow_limit: its port's share, client_flow_limit: its client address's share, no_route, no_backend, backend_unavailable).",
	}, []string{"route", "outcome"})
	active := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "coxswain_proxy_active_connections",
		Help: "Open downstream connections.",
	}, connections)
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.upstreamErrors, m.mirrorsDropped, m.refused, m.connsRefused, m.clientConnsRefused, m.retries, m.bufferRefused, m.droppedFields, m.connsClosed, m.overload, m.passthrough, m.passthroughBytes, m.udpFlows, active} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register data plane metrics: %w", err)
		}
	}
	m.unmatched = m.Route("")
	return m, nil
}

// Retry counts one retry decision for cluster: outcome is "sent", "budget_exhausted" or
// forward.RetryStaleConnection.
func (m *Metrics) Retry(cluster, outcome string) {
	if m != nil {
		m.retries.WithLabelValues(cluster, outcome).Inc()
	}
}

// BodyBufferRefused counts a body the buffer budget could not hold; use is "retry" or
// "mirror".
func (m *Metrics) BodyBufferRefused(use string) {
	if m != nil {
		m.bufferRefused.WithLabelValues(use).Inc()
	}
}

// DroppedFields counts n request fields dropped for reason ("underscore").
func (m *Metrics) DroppedFields(reason string, n int) {
	if m != nil && n > 0 {
		m.droppedFields.WithLabelValues(reason).Add(float64(n))
	}
}

// ConnectionClosed counts a downstream connection told to go away for reason.
func (m *Metrics) ConnectionClosed(reason string) {
	if m != nil {
		m.connsClosed.WithLabelValues(reason).Inc()
	}
}

// OverloadRefused counts a connection (kind "connection"), request ("request") or UDP flow
// ("udp_flow") refused above the memory watermark.
func (m *Metrics) OverloadRefused(kind string) {
	if m != nil {
		m.overload.WithLabelValues(kind).Inc()
	}
}

// Passthrough counts one connection of a TLS passthrough listener: route is empty when no route
// took it.
func (m *Metrics) Passthrough(route, outcome string) {
	if m != nil {
		m.passthrough.WithLabelValues(route, outcome).Inc()
	}
}

// UDPFlow counts a flow of a UDP listener: route is empty when no route took it.
func (m *Metrics) UDPFlow(route, outcome string) {
	if m != nil {
		m.udpFlows.WithLabelValues(route, outcome).Inc()
	}
}

// PassthroughBytes returns the counters of the bytes a route's TLS passthrough connections
// forward each way, upstream (client to backend) and downstream; they count nothing when m is
// nil.
func (m *Metrics) PassthroughBytes(route string) (upstream, downstream prometheus.Counter) {
	if m == nil {
		return discard{}, discard{}
	}
	return m.passthroughBytes.WithLabelValues(route, "upstream"), m.passthroughBytes.WithLabelValues(route, "downstream")
}

// discard is a counter that counts nothing.
type discard struct{ prometheus.Counter }

func (discard) Add(float64) {}
func (discard) Inc()        {}

// Route returns the counters of one route.
func (m *Metrics) Route(name string) *RouteCounters {
	if m == nil {
		return nil
	}
	return &RouteCounters{vec: m.requests, route: name}
}

// Unmatched returns the counters of requests no route matched.
func (m *Metrics) Unmatched() *RouteCounters {
	if m == nil {
		return nil
	}
	return m.unmatched
}

// Observe records one request's latency.
func (m *Metrics) Observe(d time.Duration) {
	if m != nil {
		m.duration.Observe(d.Seconds())
	}
}

// UpstreamError counts a failed upstream exchange.
func (m *Metrics) UpstreamError(cluster, reason string) {
	if m != nil {
		m.upstreamErrors.WithLabelValues(cluster, reason).Inc()
	}
}

// MirrorDropped counts a mirror copy that was not sent.
func (m *Metrics) MirrorDropped() {
	if m != nil {
		m.mirrorsDropped.Inc()
	}
}

// Refused counts a request the proxy answered itself, or gave up on, for reason.
func (m *Metrics) Refused(reason string) {
	if m != nil {
		m.refused.WithLabelValues(reason).Inc()
	}
}

// ClientConnectionRefused counts a connection closed because its client address held its share
// of the connection limit.
func (m *Metrics) ClientConnectionRefused() {
	if m != nil {
		m.clientConnsRefused.Inc()
	}
}

// ConnectionRefused counts a connection closed because the connection limit was reached.
func (m *Metrics) ConnectionRefused() {
	if m != nil {
		m.connsRefused.Inc()
	}
}

// RouteCounters counts one route's requests by status. Lookups read an immutable list of the
// statuses seen so far; a new status copies the list under a lock.
type RouteCounters struct {
	vec   *prometheus.CounterVec
	route string
	mu    sync.Mutex
	seen  atomic.Pointer[[]statusCounter]
}

type statusCounter struct {
	status  int
	counter prometheus.Counter
}

// Inc counts one request answered with status.
func (rc *RouteCounters) Inc(status int) {
	if rc == nil {
		return
	}
	if list := rc.seen.Load(); list != nil {
		for i := range *list {
			if (*list)[i].status == status {
				(*list)[i].counter.Inc()
				return
			}
		}
	}
	rc.add(status).Inc()
}

func (rc *RouteCounters) add(status int) prometheus.Counter {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var next []statusCounter
	if list := rc.seen.Load(); list != nil {
		for _, sc := range *list {
			if sc.status == status {
				return sc.counter
			}
		}
		next = append(next, *list...)
	}
	c := rc.vec.WithLabelValues(rc.route, strconv.Itoa(status))
	next = append(next, statusCounter{status: status, counter: c})
	rc.seen.Store(&next)
	return c
}

// Gauge is a value read when the metrics are scraped.
type Gauge struct {
	Name, Help string
	Value      func() float64
}

// RegisterGauges registers gauges on reg.
func RegisterGauges(reg prometheus.Registerer, gauges ...Gauge) error {
	for _, g := range gauges {
		if err := reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: g.Name, Help: g.Help}, g.Value)); err != nil {
			return fmt.Errorf("register data plane gauge %s: %w", g.Name, err)
		}
	}
	return nil
}

// Counter is a count read when the metrics are scraped, kept by its owner.
type Counter struct {
	Name, Help string
	Value      func() float64
}

// RegisterCounters registers counters on reg.
func RegisterCounters(reg prometheus.Registerer, counters ...Counter) error {
	for _, c := range counters {
		if err := reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: c.Name, Help: c.Help}, c.Value)); err != nil {
			return fmt.Errorf("register data plane counter %s: %w", c.Name, err)
		}
	}
	return nil
}
