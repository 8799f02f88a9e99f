package graph

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/graph/conditions"
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
// The Gateways of one namespace hold at most perNamespace internal ports together, the older
// first, so one tenant cannot take the range from the others. A pair that gets no port, its
// namespace at the cap or the range exhausted, leaves its listener not programmed
// (PortsExhausted): it is not served, and its status says so.
func allocateSharedPorts(gateways []*Gateway, services map[types.NamespacedName]*corev1.Service, namespace string, perNamespace int32) {
	shared := sharedPoolGateways(gateways)
	a := &portAllocator{
		held: heldPorts(services, namespace), assigned: map[int32]bool{}, used: map[string]int32{},
		limit: perNamespace, next: wellknown.SharedPoolFirstPort,
	}
	for _, gw := range shared {
		svc := services[types.NamespacedName{Namespace: namespace, Name: gw.SharedService}]
		if svc != nil && svc.Annotations[SharedServiceGatewayAnnotation] == gw.Key().String() {
			a.keepRecorded(gw, svc)
		}
	}
	for _, gw := range shared {
		a.assignFree(gw)
	}
	for _, gw := range shared {
		a.refuseUnallocated(gw)
	}
}

// sharedPoolGateways names the Service of every accepted shared pool Gateway with a listener
// port and returns them, oldest first.
func sharedPoolGateways(gateways []*Gateway) []*Gateway {
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
	return shared
}

// heldPorts returns the internal ports any of our Services in namespace maps.
func heldPorts(services map[types.NamespacedName]*corev1.Service, namespace string) map[int32]bool {
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
	return held
}

// portAllocator hands out the internal ports of one Build.
type portAllocator struct {
	// held are the ports our Services map; assigned those given in this Build.
	held, assigned map[int32]bool
	// used counts the ports given to the Gateways of each namespace, at most limit.
	used  map[string]int32
	limit int32
	// next is where the search for a free port resumes.
	next int32
}

// keepRecorded gives gw the internal ports its own Service svc maps its wanted listener ports
// to, unless another Gateway has them already or its namespace is at the cap.
func (a *portAllocator) keepRecorded(gw *Gateway, svc *corev1.Service) {
	wanted := acceptedPorts(gw)
	for _, p := range svc.Spec.Ports {
		internal, ok := internalPort(p)
		if _, done := gw.SharedPorts[p.Port]; !ok || done || a.assigned[internal] || !slices.Contains(wanted, p.Port) || a.full(gw) {
			continue
		}
		a.give(gw, p.Port, internal)
	}
}

// assignFree gives each listener port of gw still without an internal port the lowest free one,
// while its namespace is under the cap and the range lasts.
func (a *portAllocator) assignFree(gw *Gateway) {
	for _, port := range acceptedPorts(gw) {
		if _, done := gw.SharedPorts[port]; done {
			continue
		}
		for a.next <= wellknown.SharedPoolLastPort && (a.assigned[a.next] || a.held[a.next]) {
			a.next++
		}
		if a.next > wellknown.SharedPoolLastPort || a.full(gw) {
			return
		}
		a.give(gw, port, a.next)
	}
}

func (a *portAllocator) full(gw *Gateway) bool {
	return a.used[gw.Source.Namespace] >= a.limit
}

func (a *portAllocator) give(gw *Gateway, port, internal int32) {
	gw.SharedPorts[port] = internal
	a.assigned[internal] = true
	a.used[gw.Source.Namespace]++
}

// refuseUnallocated marks the accepted listeners of gw whose port got no internal port not
// programmed, and gw too when none of its own listeners is left programmed.
func (a *portAllocator) refuseUnallocated(gw *Gateway) {
	msg := fmt.Sprintf("No internal port of the shared pool is left: ports %d-%d are all taken",
		wellknown.SharedPoolFirstPort, wellknown.SharedPoolLastPort)
	if a.full(gw) {
		msg = fmt.Sprintf("No internal port of the shared pool: namespace %s holds its limit of %d", gw.Source.Namespace, a.limit)
	}
	refused := false
	for _, l := range gw.AllListeners() {
		if _, ok := gw.SharedPorts[l.Port]; ok || !l.Accepted() || !l.programmed {
			continue
		}
		l.programmed = false
		l.Conditions = conditions.Upsert(l.Conditions, conditions.NewListenerPortsExhausted(msg))
		conditions.Stamp(l.Conditions, l.generation())
		refused = true
	}
	if refused && !gw.anyListener((*Listener).Programmed) {
		gw.Conditions = conditions.Upsert(gw.Conditions, conditions.NewGatewayNotProgrammedInvalid("No listener is programmed"))
		conditions.Stamp(gw.Conditions, gw.Source.Generation)
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

// generation is the generation of the object the listener comes from: its ListenerSet's, else
// its Gateway's.
func (l *Listener) generation() int64 {
	if l.Set != nil {
		return l.Set.Source.Generation
	}
	return l.Gateway.Source.Generation
}

// refuseOverNamespaceLimit keeps, in each namespace, the oldest limit shared pool Gateways that
// nothing else refuses and refuses the others (NamespaceLimitReached): each shared Gateway costs
// the operator a Service in its own namespace, outside the tenant's quota, so a newcomer never
// displaces a Gateway already serving.
func refuseOverNamespaceLimit(gateways []*Gateway, limit int32) {
	byNamespace := map[string][]*Gateway{}
	for _, gw := range gateways {
		if !gw.Dedicated && gw.problem == nil {
			byNamespace[gw.Source.Namespace] = append(byNamespace[gw.Source.Namespace], gw)
		}
	}
	for ns, gws := range byNamespace {
		if int32(len(gws)) <= limit { //nolint:gosec // a count of Gateways
			continue
		}
		slices.SortFunc(gws, olderFirst)
		msg := fmt.Sprintf("Namespace %s has %d Gateways on the shared pool, the most allowed; this one is newer", ns, limit)
		for _, gw := range gws[limit:] {
			gw.problem = ptr(conditions.NewGatewayNamespaceLimitReached(msg))
		}
	}
}
