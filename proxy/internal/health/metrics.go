package health

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	state      *prometheus.GaugeVec
	svidExpiry prometheus.GaugeFunc
	age        prometheus.GaugeFunc
	svids      prometheus.Counter
	applied    prometheus.Counter
	rejected   prometheus.Counter
	reconnects prometheus.Counter
	draining   prometheus.Gauge
}

func newMetrics(t *Tracker) *metrics {
	m := &metrics{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "coxswain_proxy_discovery_state",
			Help: "1 for the current state of the discovery client (NotReady, Degraded, Ready), 0 for the others.",
		}, []string{"state"}),
		svidExpiry: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "coxswain_proxy_svid_expiry_seconds",
			Help: "Seconds until the current SVID expires; 0 before the first.",
		}, t.svidExpiresIn),
		age: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "coxswain_proxy_snapshot_age_seconds",
			Help: "Seconds since the serving snapshot was applied; 0 before the first.",
		}, t.snapshotAge),
		svids: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coxswain_proxy_svids_issued_total",
			Help: "SVIDs obtained by bootstrap, the first one and every renewal.",
		}),
		applied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coxswain_proxy_snapshots_applied_total",
			Help: "Snapshots applied and acknowledged.",
		}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coxswain_proxy_snapshots_rejected_total",
			Help: "Snapshots refused and negatively acknowledged; the previous one kept serving.",
		}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coxswain_proxy_stream_reconnects_total",
			Help: "Snapshot streams opened after the first one.",
		}),
		draining: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "coxswain_proxy_draining",
			Help: "1 once the proxy received SIGTERM and drains (/readyz fails, connections finish), 0 before.",
		}),
	}
	for _, s := range States {
		m.state.WithLabelValues(s.String())
	}
	return m
}

func (m *metrics) register(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.state, m.svidExpiry, m.age, m.svids, m.applied, m.rejected, m.reconnects, m.draining} {
		errs = append(errs, reg.Register(c))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("register proxy metrics: %w", err)
	}
	return nil
}

func (m *metrics) setState(current State) {
	for _, s := range States {
		v := 0.0
		if s == current {
			v = 1
		}
		m.state.WithLabelValues(s.String()).Set(v)
	}
}
