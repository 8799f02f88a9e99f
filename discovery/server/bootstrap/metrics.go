package bootstrap

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric label values of the result label.
const (
	resultIssued   = "issued"
	resultRejected = "rejected"
	reasonNone     = "none"
)

type metrics struct {
	total      *prometheus.CounterVec
	suppressed prometheus.Counter
	// laneRefused counts callers with a verified SVID sent to the first-bootstrap lane, by why.
	laneRefused *prometheus.CounterVec
}

// newMetrics creates the bootstrap metrics and registers them with reg when it is not nil.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coxswain_discovery_bootstrap_total",
			Help: "Bootstrap requests by result (issued, rejected) and rejection reason.",
		}, []string{"result", "reason"}),
		suppressed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coxswain_discovery_bootstrap_rejections_unreported_total",
			Help: "Bootstrap rejections neither logged nor reported as events, because the same reason and principal were lately.",
		}),
		laneRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coxswain_discovery_bootstrap_renewal_lane_refused_total",
			Help: "Bootstraps presenting a verified SVID that took the first-bootstrap lane instead of the renewal lane, by reason (SubjectMismatch, RecentlyRefused, IdentityBusy).",
		}, []string{"reason"}),
	}
	if reg == nil {
		return m, nil
	}
	if err := errors.Join(reg.Register(m.total), reg.Register(m.suppressed), reg.Register(m.laneRefused)); err != nil {
		return nil, fmt.Errorf("register bootstrap metrics: %w", err)
	}
	return m, nil
}

func (m *metrics) issued() { m.total.WithLabelValues(resultIssued, reasonNone).Inc() }

func (m *metrics) rejected(r Reason) { m.total.WithLabelValues(resultRejected, string(r)).Inc() }
