package graph

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"coxswain.dev/coxswain/discovery/wellknown"
)

// SharedServiceGatewayAnnotation is on the Service of a shared pool Gateway: the Gateway's
// namespace/name. With the Service's target ports it is the record of the Gateway's internal
// ports (see allocateSharedPorts).
const SharedServiceGatewayAnnotation = "gateway.coxswain.dev/gateway"

// allocateSharedPorts gives every accepted shared pool Gateway its Service name and one internal
// port (wellknown.SharedPoolFirstPort to SharedPoolLastPort) per distinct accepted listener port,
// used by no other Gateway. The pool binds a Gateway's listeners on its internal ports and the
// Gateway's Service maps each listener port to its internal port, so the port a connection
// arrives on says which Gateway it is for.
//
// The existing Services are the record, so an allocation is stable across rebuilds and
// controller restarts: Gateways, oldest first, keep the internal ports their own Service maps
// their listener ports to, unless an older Gateway already has that port (a hand edit); the
// pairs left get the lowest free ports. A port that any of our Services still maps is not free
// even when its Gateway no longer wants it, so it is never handed to another Gateway while
// traffic for the old one can still arrive on it. The same state always gives the same result.
//
// When the range is exhausted, the pairs left get no port: their listeners are not served.
func allocateSharedPorts(gateways []*Gateway, services map[types.NamespacedName]*corev1.Service, namespace string) {
	var shared []*Gateway
	for _, gw := range gateways {
		if gw.Accepted && !gw.Dedicated {
			if ports := acceptedPorts(gw); len(ports) > 0 {
				gw.SharedService = wellknown.SharedGatewayServiceName(gw.Source.Namespace, gw.Source.Name)
				gw.SharedPorts = make(map[int32]int32, len(ports))
				shared = append(shared, gw)
			}
		}
	}
	slices.SortFunc(shared, olderFirst)
	held := map[int32]bool{}
	for key, svc := range services {
		if key.Namespace != namespace || svc.Annotations[SharedServiceGatewayAnnotation] == "" {
			continue
		}
		for _, p := range svc.Spec.Ports {
			if internal, ok := internalPort(p); ok {
				held[internal] = true
			}
		}
	}
	assigned := map[int32]bool{}
	for _, gw := range shared {
		svc := services[types.NamespacedName{Namespace: namespace, Name: gw.SharedService}]
		if svc == nil || svc.Annotations[SharedServiceGatewayAnnotation] != gw.Key().String() {
			continue
		}
		wanted := acceptedPorts(gw)
		for _, p := range svc.Spec.Ports {
			internal, ok := internalPort(p)
			if _, done := gw.SharedPorts[p.Port]; ok && !done && !assigned[internal] && slices.Contains(wanted, p.Port) {
				gw.SharedPorts[p.Port] = internal
				assigned[internal] = true
			}
		}
	}
	next := int32(wellknown.SharedPoolFirstPort)
	for _, gw := range shared {
		for _, port := range acceptedPorts(gw) {
			if _, done := gw.SharedPorts[port]; done {
				continue
			}
			for next <= wellknown.SharedPoolLastPort && (assigned[next] || held[next]) {
				next++
			}
			if next > wellknown.SharedPoolLastPort {
				return
			}
			gw.SharedPorts[port] = next
			assigned[next] = true
		}
	}
}

// internalPort returns the internal port a Service port maps to, if it is one.
func internalPort(p corev1.ServicePort) (int32, bool) {
	if p.TargetPort.Type != 0 { // a named target port is no record of ours
		return 0, false
	}
	t := p.TargetPort.IntVal
	return t, t >= wellknown.SharedPoolFirstPort && t <= wellknown.SharedPoolLastPort
}

// acceptedPorts returns the distinct ports of gw's accepted listeners, sorted.
func acceptedPorts(gw *Gateway) []int32 {
	var ports []int32
	for _, l := range gw.AllListeners() {
		if l.Accepted() {
			ports = append(ports, l.Port)
		}
	}
	slices.Sort(ports)
	return slices.Compact(ports)
}
