package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/provision"
)

// maximumLengthName is a Gateway name of the longest length Kubernetes allows, 253 characters,
// as the GatewayNameMaximumLength conformance test creates one, ending with last.
func maximumLengthName(last string) string {
	const prefix = "gateway-name-maximum-length-"
	return prefix + strings.Repeat("a", 253-len(prefix)-len(last)) + last
}

// Tests that Gateways of 253-character names, two with dedicated proxies and two on the shared
// pool, each pair differing only in its last character, get their objects from the real API
// server, each its own: ServiceAccount, Deployment and Service of a dedicated proxy under a name
// of at most 63 characters, a Deployment whose pods the ReplicaSet controller creates, a shared
// pool Service in the operator's namespace; and that every Gateway's conditions are at its
// latest generation, which is what GatewayNameMaximumLength asks.
func TestGatewaysOfMaximumLengthNamesAreProvisioned(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, ns)
	startProvision(t, ns)
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	h.create(&v1alpha1.CoxswainGatewayParameters{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "params"}})
	dedicated := []*gwapiv1.Gateway{dedicatedGateway(ns, maximumLengthName("a"), class), dedicatedGateway(ns, maximumLengthName("b"), class)}
	shared := []*gwapiv1.Gateway{newGateway(ns, maximumLengthName("c"), class), newGateway(ns, maximumLengthName("d"), class)}
	for _, gw := range append(dedicated, shared...) {
		if len(gw.Name) != 253 {
			t.Fatalf("Gateway name of %d characters, want 253", len(gw.Name))
		}
		h.create(gw)
	}

	names := map[string]string{}
	for _, gw := range dedicated {
		name := wellknown.DedicatedProxyName(gw.Name, class)
		if len(name) > wellknown.MaxNameLength {
			t.Fatalf("proxy name %q has %d characters", name, len(name))
		}
		names[name] = gw.Name
		eventually(t, "the proxy objects of a 253-character Gateway exist", func() error { return provisionedLong(h.c, gw, name) })
		eventually(t, "the proxy Deployment of a 253-character Gateway has pods", func() error { return hasPods(h.c, ns, name) })
	}
	for _, gw := range shared {
		name := wellknown.SharedGatewayServiceName(ns, gw.Name)
		names[name] = gw.Name
		eventually(t, "the shared pool Service of a 253-character Gateway exists", func() error {
			var svc corev1.Service
			if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &svc); err != nil {
				return err
			}
			if got := svc.Labels[provision.GatewayNameLabel]; got != wellknown.LabelValue(gw.Name) {
				return fmt.Errorf("Service %s has gateway-name %q", name, got)
			}
			return nil
		})
	}
	if len(names) != 4 {
		t.Fatalf("four Gateways got %d distinct names: %v", len(names), names)
	}
	for _, gw := range append(dedicated, shared...) {
		eventually(t, "a 253-character Gateway has its conditions at its generation", func() error {
			var cur gwapiv1.Gateway
			h.get(&cur, ns, gw.Name)
			accepted := false
			for _, c := range cur.Status.Conditions {
				if c.ObservedGeneration != cur.Generation {
					return fmt.Errorf("%s at generation %d, the Gateway is at %d", c.Type, c.ObservedGeneration, cur.Generation)
				}
				accepted = accepted || c.Type == string(gwapiv1.GatewayConditionAccepted) && c.Status == metav1.ConditionTrue
			}
			if !accepted {
				return fmt.Errorf("not accepted: %+v", cur.Status.Conditions)
			}
			return nil
		})
	}
}

// provisionedLong checks that the ServiceAccount, Deployment and Service named name exist, are
// controlled by gw and carry its name as a label value cut to 63 characters.
func provisionedLong(c client.Client, gw *gwapiv1.Gateway, name string) error {
	for _, obj := range proxyObjects() {
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: gw.Namespace, Name: name}, obj); err != nil {
			return fmt.Errorf("%T: %w", obj, err)
		}
		if ref := metav1.GetControllerOf(obj); ref == nil || ref.UID != gw.UID || ref.Name != gw.Name {
			return fmt.Errorf("%T is controlled by %+v, want Gateway %s", obj, ref, gw.UID)
		}
		l := obj.GetLabels()
		if got := l[provision.GatewayNameLabel]; got != wellknown.LabelValue(gw.Name) || len(got) > 63 {
			return fmt.Errorf("%T has gateway-name %q", obj, got)
		}
		if l[provision.InstanceLabel] != name {
			return fmt.Errorf("%T has instance %q, want %q", obj, l[provision.InstanceLabel], name)
		}
	}
	return nil
}

// hasPods checks that the ReplicaSet controller created pods of Deployment ns/name.
func hasPods(c client.Client, ns, name string) error {
	var dep appsv1.Deployment
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &dep); err != nil {
		return err
	}
	var pods corev1.PodList
	if err := c.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels(dep.Spec.Selector.MatchLabels)); err != nil {
		return err
	}
	if len(pods.Items) == 0 {
		return fmt.Errorf("no pods of Deployment %s (conditions %+v)", name, dep.Status.Conditions)
	}
	return nil
}
