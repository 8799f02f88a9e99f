package stream

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	connected *prometheus.GaugeVec
	sent      *prometheus.CounterVec
	acks      prometheus.Counter
	nacks     prometheus.Counter
	ackDelay  prometheus.Histogram
	denied    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "coxswain_discovery_connected_proxies",
			Help: "Subscribed proxy streams by scope.",
		}, []string{"scope"}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coxswain_discovery_snapshots_sent_total",
			Help: "Snapshot messages sent, by kind (full, delta).",
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
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coxswain_discovery_streams_closed_total",
			Help: "Streams refused or closed by the server, by reason.",
		}, []string{"reason"}),
	}
	if reg == nil {
		return m, nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.connected, m.sent, m.acks, m.nacks, m.ackDelay, m.denied} {
		errs = append(errs, reg.Register(c))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("register stream metrics: %w", err)
	}
	return m, nil
}
