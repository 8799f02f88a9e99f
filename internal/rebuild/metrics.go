package rebuild

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"coxswain.dev/coxswain/discovery/server/cache"
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
	}
	if reg == nil {
		return m, nil
	}
	if err := errors.Join(reg.Register(m.duration), reg.Register(m.size), reg.Register(m.failures)); err != nil {
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

// observeFailures counts the scopes that failed in a rebuild.
func (m *Metrics) observeFailures(failed []ScopeFailure) {
	if m == nil {
		return
	}
	for _, f := range failed {
		m.failures.WithLabelValues(scopeKind(f.Scope)).Inc()
	}
}

func scopeKind(scope cache.Scope) string {
	if scope.Kind == cache.KindGateway {
		return scopeKindGateway
	}
	return scopeKindSharedPool
}
