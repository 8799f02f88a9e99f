package stream

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"coxswain.dev/coxswain/discovery/server/cache"
)

type metrics struct {
	connected   *prometheus.GaugeVec
	sent        *prometheus.CounterVec
	encoded     *prometheus.CounterVec
	acks        prometheus.Counter
	nacks       prometheus.Counter
	ackDelay    prometheus.Histogram
	convergence prometheus.Histogram
	// changeConvergence times converged versions from the object change they include.
	changeConvergence prometheus.Histogram
	denied            *prometheus.CounterVec
	sizes             *sizeCollector
}

func newMetrics(reg prometheus.Registerer, snapshots *cache.Cache) (*metrics, error) {
	m := &metrics{
		connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "coxswain_discovery_connected_proxies",
			Help: "Subscribed proxy streams by scope.",
		}, []string{"scope"}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coxswain_discovery_snapshots_sent_total",
			Help: "Snapshot messages sent, by kind (full, delta).",
		}, []string{"kind"}),
		encoded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coxswain_discovery_snapshot_encodings_total",
			Help: "Snapshot messages encoded, by kind (full, delta); every stream sending the same version, or the same delta, shares one encoding.",
		}, []string{"kind"}),
		acks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coxswain_discovery_snapshot_acks_total",
			Help: "Snapshot messages acknowledged by proxies.",
		}),
		nacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coxswain_discovery_snapshot_nacks_total",
			Help: "Snapshot messages refused by proxies.",
		}),
		ackDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "coxswain_discovery_snapshot_ack_delay_seconds",
			Help:    "Seconds from a new snapshot version in the cache to its acknowledgement by a proxy.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		convergence: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "coxswain_discovery_snapshot_convergence_seconds",
			Help:    "Seconds from a new snapshot version in the cache to its acknowledgement by the last connected proxy of its scope.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		changeConvergence: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "coxswain_discovery_change_convergence_seconds",
			Help: "Seconds from the earliest object change a snapshot version includes (the controller's watch event) to its acknowledgement by the last connected proxy of its scope.",
			// From 1 ms: a change on a quiet controller converges in milliseconds.
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coxswain_discovery_streams_closed_total",
			Help: "Streams refused or closed by the server, by reason.",
		}, []string{"reason"}),
		sizes: &sizeCollector{cache: snapshots, desc: prometheus.NewDesc("coxswain_discovery_snapshot_encoded_bytes",
			"Size of the encoded full snapshot of each scope, in bytes.", []string{"scope"}, nil)},
	}
	if reg == nil {
		return m, nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.connected, m.sent, m.encoded, m.acks, m.nacks, m.ackDelay, m.convergence, m.changeConvergence, m.denied, m.sizes} {
		errs = append(errs, reg.Register(c))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("register stream metrics: %w", err)
	}
	return m, nil
}

// sizeCollector reports the encoded size of every scope's current snapshot when scraped, so
// that a deleted scope leaves no series behind.
type sizeCollector struct {
	cache *cache.Cache
	desc  *prometheus.Desc
}

func (c *sizeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *sizeCollector) Collect(ch chan<- prometheus.Metric) {
	for scope, snap := range c.cache.Snapshots() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(snap.EncodedSize()), scope.String())
	}
}

// observeConvergence records a version that every live stream of its scope acknowledged, the
// last of them at lastAck: from its Set in the cache and, when the controller recorded it, from
// the object change it includes.
func (m *metrics) observeConvergence(_ cache.Scope, snap *cache.Snapshot, lastAck time.Time) {
	m.convergence.Observe(lastAck.Sub(snap.CreatedAt()).Seconds())
	if changed := snap.ChangedAt(); !changed.IsZero() {
		m.changeConvergence.Observe(lastAck.Sub(changed).Seconds())
	}
}
