package controllers

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/graph/conditions"
)

// ProvisionMetrics are the provisioner's Prometheus metrics. A nil *ProvisionMetrics records
// nothing.
type ProvisionMetrics struct {
	refused          *prometheus.GaugeVec
	images           prometheus.Counter
	tracingEndpoints prometheus.Counter
	tolerations      prometheus.Counter
}

// NewProvisionMetrics creates the provisioner's metrics and registers them with reg when it is
// not nil (the operator passes controller-runtime's registry).
func NewProvisionMetrics(reg prometheus.Registerer) (*ProvisionMetrics, error) {
	m := &ProvisionMetrics{
		refused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "coxswain_shared_pool_refused",
			Help: "What the shared pool's per-namespace caps refuse in the latest graph: Gateways not accepted (reason NamespaceLimitReached) " +
				"and listeners without an internal port (reason PortsExhausted, also when the range is taken).",
		}, []string{"reason"}),
		images: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coxswain_provision_images_refused_total",
			Help: "Reconciles that left out the image of a Gateway's own parameters, which spec.proxy.allowedImages does not list, for the default image.",
		}),
		tracingEndpoints: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coxswain_provision_tracing_endpoints_refused_total",
			Help: "Reconciles that left out the tracing of a Gateway's own parameters, whose endpoint spec.proxy.allowedTracingEndpoints does not admit, for spec.proxy.tracing.",
		}),
		tolerations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coxswain_provision_tolerations_refused_total",
			Help: "Reconciles that left out tolerations of a Gateway's parameters: of the control-plane taints, or without a key.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	if err := errors.Join(reg.Register(m.refused), reg.Register(m.images), reg.Register(m.tracingEndpoints), reg.Register(m.tolerations)); err != nil {
		return nil, fmt.Errorf("register provision metrics: %w", err)
	}
	return m, nil
}

// observeSharedPool sets the refused gauge from g.
func (m *ProvisionMetrics) observeSharedPool(g *graph.Graph) {
	if m == nil {
		return
	}
	var gateways, listeners int
	for _, gw := range g.Gateways {
		if c := meta.FindStatusCondition(gw.Conditions, string(gwapiv1.GatewayConditionAccepted)); c != nil && c.Reason == conditions.ReasonNamespaceLimitReached {
			gateways++
		}
		for _, l := range gw.AllListeners() {
			if c := meta.FindStatusCondition(l.Conditions, string(gwapiv1.ListenerConditionProgrammed)); c != nil && c.Reason == conditions.ReasonPortsExhausted {
				listeners++
			}
		}
	}
	m.refused.WithLabelValues(conditions.ReasonNamespaceLimitReached).Set(float64(gateways))
	m.refused.WithLabelValues(conditions.ReasonPortsExhausted).Set(float64(listeners))
}

// imageRefused counts one reconcile that left out a Gateway's own image.
func (m *ProvisionMetrics) imageRefused() {
	if m != nil {
		m.images.Inc()
	}
}

// tracingEndpointRefused counts one reconcile that left out a Gateway's own tracing endpoint.
func (m *ProvisionMetrics) tracingEndpointRefused() {
	if m != nil {
		m.tracingEndpoints.Inc()
	}
}

// tolerationsRefused counts one reconcile that left out tolerations of a Gateway's parameters.
func (m *ProvisionMetrics) tolerationsRefused() {
	if m != nil {
		m.tolerations.Inc()
	}
}
