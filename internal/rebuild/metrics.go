package rebuild

import (
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/internal/graph"
)

// Scope kind label values of the snapshot size metric.
const (
	scopeKindSharedPool = "shared-pool"
	scopeKindGateway    = "gateway"
)

// Metrics are the translation pipeline's Prometheus metrics. A nil *Metrics records nothing.
type Metrics struct {
	duration *prometheus.HistogramVec
	size     *prometheus.HistogramVec
	failures *prometheus.CounterVec
	tooLarge *prometheus.CounterVec
	scopes   *scopeCollector
}

// NewMetrics creates the pipeline's metrics and registers them with reg when it is not nil (the
// operator passes controller-runtime's registry, which its metrics endpoint serves).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "coxswain_rebuild_duration_seconds",
			Help: "Seconds one rebuild took, from reading the cache to publishing snapshots (status is written afterwards, in the background), " +
				"by the kind of change that triggered it (Multiple when several kinds coalesced, None when none was recorded).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"trigger"}),
		size: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "coxswain_rebuild_snapshot_bytes",
			Help:    "Encoded size in bytes of each new snapshot version a rebuild published, by scope kind (shared-pool, gateway).",
			Buckets: prometheus.ExponentialBuckets(1024, 4, 10),
		}, []string{"scope_kind"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coxswain_rebuild_scope_failures_total",
			Help: "Scopes whose compile or encode failed in a rebuild, by scope kind (shared-pool, gateway); such a scope keeps publishing its last snapshot.",
		}, []string{"scope_kind"}),
		tooLarge: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coxswain_rebuild_snapshots_too_large_total",
			Help: "Snapshots a rebuild did not publish because their encoding took more than coxswain_rebuild_snapshot_limit_bytes, by scope kind (shared-pool, gateway); such a scope keeps publishing its last snapshot.",
		}, []string{"scope_kind"}),
		scopes: newScopeCollector(),
	}
	if reg == nil {
		return m, nil
	}
	if err := errors.Join(reg.Register(m.duration), reg.Register(m.size), reg.Register(m.failures), reg.Register(m.tooLarge), reg.Register(m.scopes)); err != nil {
		return nil, fmt.Errorf("register rebuild metrics: %w", err)
	}
	return m, nil
}

// ObserveRebuild records one completed rebuild that took d and handled the changes of t.
func (m *Metrics) ObserveRebuild(t Trigger, d time.Duration) {
	if m == nil {
		return
	}
	m.duration.WithLabelValues(t.Label()).Observe(d.Seconds())
}

// observeSnapshot records the encoded size of a new snapshot of scope: the full snapshot a proxy
// receives (cache.Snapshot.EncodedSize, which the snapshot adds up from its resources' sizes,
// kept from the version before for every resource it shares).
func (m *Metrics) observeSnapshot(scope cache.Scope, s *cache.Snapshot) {
	if m == nil {
		return
	}
	m.size.WithLabelValues(scopeKind(scope)).Observe(float64(s.EncodedSize()))
}

// observeFailures counts the scopes that failed in a rebuild, and apart those whose snapshot
// was too large to publish.
func (m *Metrics) observeFailures(failed []ScopeFailure) {
	if m == nil {
		return
	}
	for _, f := range failed {
		m.failures.WithLabelValues(scopeKind(f.Scope)).Inc()
		if errors.Is(f.Err, ErrSnapshotTooLarge) {
			m.tooLarge.WithLabelValues(scopeKind(f.Scope)).Inc()
		}
	}
}

// observeScopes records the encoded size of every scope's latest snapshot, published or not,
// and the routes refused on each scope for its size.
func (m *Metrics) observeScopes(sizes map[cache.Scope]int, refusals []graph.SizeRefusal) {
	if m == nil {
		return
	}
	refused := map[cache.Scope]int{}
	for _, r := range refusals {
		refused[refusalScope(r)]++
	}
	m.scopes.set(sizes, refused)
}

// refusalScope is the discovery scope of a graph size refusal.
func refusalScope(r graph.SizeRefusal) cache.Scope {
	if r.Scope.Name == "" {
		return cache.SharedPool()
	}
	return cache.Gateway(r.Scope.Namespace, r.Scope.Name)
}

// scopeCollector reports, when scraped, the encoded size of every scope's latest snapshot
// against the most a published snapshot may take, and the routes refused on each scope for its
// size (zero for a scope without any), so that a scope that is gone leaves no series behind.
type scopeCollector struct {
	size, limit, refused *prometheus.Desc

	mu      sync.Mutex
	sizes   map[cache.Scope]int
	refusal map[cache.Scope]int
}

func newScopeCollector() *scopeCollector {
	return &scopeCollector{
		size: prometheus.NewDesc("coxswain_rebuild_scope_snapshot_bytes",
			"Encoded size in bytes of the latest snapshot a rebuild made of each scope, published or not: one above coxswain_rebuild_snapshot_limit_bytes is not published, and the scope keeps its last.",
			[]string{"scope"}, nil),
		limit: prometheus.NewDesc("coxswain_rebuild_snapshot_limit_bytes",
			"The most bytes the encoding of a scope's snapshot may take to be published: the stream's message cap less room for a delta's removed keys and framing.",
			nil, nil),
		refused: prometheus.NewDesc("coxswain_rebuild_scope_routes_refused",
			"Routes not accepted on the Gateways of each scope because its snapshot could not hold them (reason SnapshotSizeLimitReached): their namespace's share, or every namespace's routes together, would take too many bytes.",
			[]string{"scope"}, nil),
	}
}

func (c *scopeCollector) set(sizes, refused map[cache.Scope]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sizes, c.refusal = maps.Clone(sizes), refused
}

func (c *scopeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.size
	ch <- c.limit
	ch <- c.refused
}

func (c *scopeCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, discoveryv1.MaxSnapshotBytes)
	c.mu.Lock()
	defer c.mu.Unlock()
	for scope, size := range c.sizes {
		ch <- prometheus.MustNewConstMetric(c.size, prometheus.GaugeValue, float64(size), scope.String())
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.GaugeValue, float64(c.refusal[scope]), scope.String())
	}
	for scope, n := range c.refusal {
		if _, ok := c.sizes[scope]; !ok {
			ch <- prometheus.MustNewConstMetric(c.refused, prometheus.GaugeValue, float64(n), scope.String())
		}
	}
}

func scopeKind(scope cache.Scope) string {
	if scope.Kind == cache.KindGateway {
		return scopeKindGateway
	}
	return scopeKindSharedPool
}
