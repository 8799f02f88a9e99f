package controllers

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/provision"
)

// squatterService creates a LoadBalancer Service ns/name that carries the labels of the proxy
// Services of ours for component, and the annotations given, and gives it the load balancer
// address ip. It has no owner.
func squatterService(t *testing.T, h *gatewayAPI, ns, name, component string, annotations map[string]string, ip string) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels: map[string]string{
				provision.NameLabel: "coxswain", provision.ComponentLabel: component, provision.ManagedByLabel: provision.ManagedBy,
			},
			Annotations: annotations,
		},
		Spec: corev1.ServiceSpec{
			Type:  corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Name: "p80", Port: 80, TargetPort: intstr.FromInt32(29999)}},
		},
	}
	h.create(svc)
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
	if err := h.c.Status().Update(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
}

// Tests that a shared pool Gateway never reports the address of a Service of its computed name
// that records another Gateway (a squatter that found a colliding name): the Gateway shows no
// address and AddressNotAssigned, and the provisioner says the name is taken.
func TestSharedGatewayReportsNoAddressOfAServiceItDoesNotOwn(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, ns)
	startProvision(t, ns)
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	squatterService(t, h, ns, wellknown.SharedGatewayServiceName(ns, "victim"), provision.SharedComponent,
		map[string]string{graph.SharedServiceGatewayAnnotation: ns + "/squatter"}, "198.51.100.66")
	h.create(newGateway(ns, "victim", class))

	programmed := string(gwapiv1.GatewayConditionProgrammed)
	eventually(t, "the victim reports no address", gatewayStatus(h, ns, "victim", programmed, metav1.ConditionFalse, string(gwapiv1.GatewayReasonAddressNotAssigned), ""))
	eventually(t, "a ProxyNameTaken event", warningEvent(h, ns, "victim", ReasonProxyNameTaken))
}

// Tests that a dedicated Gateway never reports the address of a Service of its proxy's name
// that it does not control.
func TestDedicatedGatewayReportsNoAddressOfAServiceItDoesNotOwn(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, ns)
	startProvision(t, ns)
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	h.create(&v1alpha1.CoxswainGatewayParameters{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "params"}})
	squatterService(t, h, ns, wellknown.DedicatedProxyName("edge", class), provision.Component, nil, "198.51.100.67")
	h.create(dedicatedGateway(ns, "edge", class))

	programmed := string(gwapiv1.GatewayConditionProgrammed)
	eventually(t, "a ProxyNameTaken event", warningEvent(h, ns, "edge", ReasonProxyNameTaken))
	eventually(t, "the Gateway reports no address", gatewayStatus(h, ns, "edge", programmed, metav1.ConditionFalse, string(gwapiv1.GatewayReasonAddressNotAssigned), ""))
}
