package controllers

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/graph/conditions"
)

// Tests that a namespace gets no more shared pool Gateways than MaxSharedGatewaysPerNamespace:
// the newer one is Accepted=False (NamespaceLimitReached) with a Warning event and gets no
// Service in the operator's namespace, while the older one keeps its Service.
func TestSharedGatewayBeyondTheNamespaceCapIsRefused(t *testing.T) {
	ns := newNamespace(t)
	opts := graph.Options{Namespace: ns, MaxSharedGatewaysPerNamespace: 1}
	h := startGatewayAPIWith(t, true, opts)
	r := startProvisionWith(t, opts, testDefaults)
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	// Created in this order, and named so that the tie-break of equal creation times (whole
	// seconds) agrees: a-first is the older.
	h.create(newGateway(ns, "a-first", class))
	h.create(newGateway(ns, "b-second", class))

	accepted := string(gwapiv1.GatewayConditionAccepted)
	eventually(t, "the newer Gateway is refused", gatewayStatus(h, ns, "b-second", accepted, metav1.ConditionFalse, conditions.ReasonNamespaceLimitReached, ""))
	eventually(t, "a NamespaceLimitReached event", warningEvent(h, ns, "b-second", conditions.ReasonNamespaceLimitReached))
	eventually(t, "the refused gauge counts the Gateway", gauge(r.Metrics.refused.WithLabelValues(conditions.ReasonNamespaceLimitReached), 1))
	eventually(t, "the older Gateway has its Service", func() error {
		return h.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: wellknown.SharedGatewayServiceName(ns, "a-first")}, &corev1.Service{})
	})
	err := h.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: wellknown.SharedGatewayServiceName(ns, "b-second")}, &corev1.Service{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the refused Gateway got a Service: %v", err)
	}
}

// Tests that a listener port beyond the namespace's MaxSharedPortsPerNamespace gets no internal
// port: its listener is Programmed=False (PortsExhausted) with a Warning event, and the Service
// maps only the ports that got one.
func TestSharedListenerBeyondTheNamespacePortCapIsNotProgrammed(t *testing.T) {
	ns := newNamespace(t)
	opts := graph.Options{Namespace: ns, MaxSharedPortsPerNamespace: 1}
	h := startGatewayAPIWith(t, true, opts)
	r := startProvisionWith(t, opts, testDefaults)
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	gw := newGateway(ns, "web", class)
	gw.Spec.Listeners = append(gw.Spec.Listeners, gwapiv1.Listener{Name: "alt", Port: 8080, Protocol: gwapiv1.HTTPProtocolType})
	h.create(gw)

	eventually(t, "listener alt is PortsExhausted, listener http programmed", func() error {
		var cur gwapiv1.Gateway
		h.get(&cur, ns, "web")
		var errs []error
		for _, l := range cur.Status.Listeners {
			want, reason := metav1.ConditionTrue, string(gwapiv1.ListenerReasonProgrammed)
			if l.Name == "alt" {
				want, reason = metav1.ConditionFalse, conditions.ReasonPortsExhausted
			}
			if err := wantCondition(l.Conditions, string(gwapiv1.ListenerConditionProgrammed), want, reason); err != nil {
				errs = append(errs, fmt.Errorf("listener %s: %w", l.Name, err))
			}
		}
		if len(cur.Status.Listeners) != 2 {
			errs = append(errs, fmt.Errorf("listeners %+v", cur.Status.Listeners))
		}
		return errors.Join(errs...)
	})
	eventually(t, "a PortsExhausted event", warningEvent(h, ns, "web", conditions.ReasonPortsExhausted))
	eventually(t, "the refused gauge counts the listener", gauge(r.Metrics.refused.WithLabelValues(conditions.ReasonPortsExhausted), 1))
	eventually(t, "the Service maps port 80 only", func() error {
		var svc corev1.Service
		if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: wellknown.SharedGatewayServiceName(ns, "web")}, &svc); err != nil {
			return err
		}
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 80 {
			return fmt.Errorf("ports %+v", svc.Spec.Ports)
		}
		return nil
	})
}

// Tests that the image of a Gateway's own parameters that the allowed images do not list is not
// run: the proxy Deployment runs the default image, and a Warning event says why.
func TestImageOfAGatewaysOwnParametersNeedsTheAllowlist(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, ns)
	defaults := testDefaults
	defaults.AllowedImages = []string{"registry.example/coxswain-proxy:*"}
	r := startProvisionWith(t, graph.Options{Namespace: ns}, defaults)
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	h.create(&v1alpha1.CoxswainGatewayParameters{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "params"},
		Spec:       v1alpha1.CoxswainGatewayParametersSpec{Image: ptr.To("attacker.example/proxy:latest")},
	})
	h.create(dedicatedGateway(ns, "edge", class))

	eventually(t, "an ImageNotAllowed event", warningEvent(h, ns, "edge", ReasonImageNotAllowed))
	if n := value(t, r.Metrics.images); n < 1 {
		t.Errorf("coxswain_provision_images_refused_total = %v, want at least 1", n)
	}
	eventually(t, "the proxy runs the default image", func() error {
		var d appsv1.Deployment
		if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: wellknown.DedicatedProxyName("edge", class)}, &d); err != nil {
			return err
		}
		if img := d.Spec.Template.Spec.Containers[0].Image; img != testDefaults.Image {
			return fmt.Errorf("image %q, want the default %q", img, testDefaults.Image)
		}
		return nil
	})
	var gw gwapiv1.Gateway
	h.get(&gw, ns, "edge")
	if c := meta.FindStatusCondition(gw.Status.Conditions, string(gwapiv1.GatewayConditionAccepted)); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Accepted = %+v, want True: the Gateway is served, with the default image", c)
	}
}

// gauge checks that the value of g is want.
func gauge(g prometheus.Gauge, want float64) func() error {
	return func() error {
		var m dto.Metric
		if err := g.Write(&m); err != nil {
			return err
		}
		if got := m.GetGauge().GetValue(); got != want {
			return fmt.Errorf("gauge = %v, want %v", got, want)
		}
		return nil
	}
}

// value returns the value of the counter c.
func value(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
