// Package statetest builds cluster states for benchmarks and tests of the translation pipeline.
package statetest

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/state"
)

// Synthetic is the cluster every pipeline benchmark uses, so that their figures compare: 10
// shared pool Gateways "infra/gw-<n>" of one HTTP listener each, one Service "svc-<n>" (three
// endpoints) per 10 routes, and routes "route-<n>" of two rules with two matches each, spread
// over 10 namespaces "ns-<n>" and 500 hostnames.
func Synthetic(routes int) *state.ClusterState {
	cs := state.New()
	class := &gwapiv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "coxswain"}}
	class.Spec.ControllerName = wellknown.GatewayControllerName
	cs.GatewayClasses[state.Key(class)] = class
	const gateways, namespaces = 10, 10
	all := gwapiv1.NamespacesFromAll
	for i := range gateways {
		gw := &gwapiv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: fmt.Sprintf("gw-%d", i)}}
		gw.Spec.GatewayClassName = "coxswain"
		gw.Spec.Listeners = []gwapiv1.Listener{{
			Name: "http", Port: 80, Protocol: gwapiv1.HTTPProtocolType,
			AllowedRoutes: &gwapiv1.AllowedRoutes{Namespaces: &gwapiv1.RouteNamespaces{From: &all}},
		}}
		cs.Gateways[state.Key(gw)] = gw
	}
	for i := range routes / 10 {
		addService(cs, fmt.Sprintf("ns-%d", i%namespaces), fmt.Sprintf("svc-%d", i))
	}
	for i := range routes {
		r := route(i, fmt.Sprintf("ns-%d", (i/10)%namespaces), fmt.Sprintf("gw-%d", i%gateways), fmt.Sprintf("svc-%d", i/10))
		cs.HTTPRoutes[state.Key(r)] = r
	}
	return cs
}

func route(i int, ns, gateway, service string) *gwapiv1.HTTPRoute {
	r := &gwapiv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("route-%d", i), Generation: 1}}
	gwNamespace := gwapiv1.Namespace("infra")
	r.Spec.ParentRefs = []gwapiv1.ParentReference{{Name: gwapiv1.ObjectName(gateway), Namespace: &gwNamespace}}
	r.Spec.Hostnames = []gwapiv1.Hostname{gwapiv1.Hostname(fmt.Sprintf("host-%d.example.com", i%500))}
	port := gwapiv1.PortNumber(8080)
	backend := gwapiv1.HTTPBackendRef{BackendRef: gwapiv1.BackendRef{BackendObjectReference: gwapiv1.BackendObjectReference{
		Name: gwapiv1.ObjectName(service), Port: &port,
	}}}
	exact, prefix := gwapiv1.PathMatchExact, gwapiv1.PathMatchPathPrefix
	for rule := range 2 {
		p1, p2 := fmt.Sprintf("/r%d/%d", i, rule), fmt.Sprintf("/r%d/%d/exact", i, rule)
		r.Spec.Rules = append(r.Spec.Rules, gwapiv1.HTTPRouteRule{
			Matches: []gwapiv1.HTTPRouteMatch{
				{Path: &gwapiv1.HTTPPathMatch{Type: &prefix, Value: &p1}},
				{Path: &gwapiv1.HTTPPathMatch{Type: &exact, Value: &p2}, Headers: []gwapiv1.HTTPHeaderMatch{{Name: "x-tenant", Value: ns}}},
			},
			BackendRefs: []gwapiv1.HTTPBackendRef{backend},
		})
	}
	return r
}

func addService(cs *state.ClusterState, ns, name string) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	svc.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 8080}}
	svc.Spec.Selector = map[string]string{"app": name}
	cs.Services[state.Key(svc)] = svc
	portName, portNumber := "http", int32(8080)
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-1", Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &portNumber}},
	}
	for e := range 3 {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.%d.%d.%d", len(ns), len(name), e+1)}})
	}
	cs.EndpointSlices[state.Key(slice)] = slice
}
