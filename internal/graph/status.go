package graph

import (
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Status is the status the graph computed for every object it owns, ready for a status writer
// to compare with what is stored and write when it differs. Conditions carry ObservedGeneration
// but no LastTransitionTime: the writer merges them (meta.SetStatusCondition) and stamps times.
type Status struct {
	GatewayClasses []GatewayClassStatus `json:"gatewayClasses,omitempty"`
	Gateways       []GatewayStatus      `json:"gateways,omitempty"`
	HTTPRoutes     []HTTPRouteStatus    `json:"httpRoutes,omitempty"`
	// GRPCRoutes are the parent statuses of GRPCRoutes, as HTTPRoutes' are.
	GRPCRoutes []HTTPRouteStatus `json:"grpcRoutes,omitempty"`
	// TLSRoutes are the parent statuses of TLSRoutes, as HTTPRoutes' are.
	TLSRoutes []HTTPRouteStatus `json:"tlsRoutes,omitempty"`
	// TCPRoutes are the parent statuses of TCPRoutes, as HTTPRoutes' are.
	TCPRoutes []HTTPRouteStatus `json:"tcpRoutes,omitempty"`
	// UDPRoutes are the parent statuses of UDPRoutes, as HTTPRoutes' are.
	UDPRoutes []HTTPRouteStatus `json:"udpRoutes,omitempty"`
	// BackendTLSPolicies holds every policy, with no ancestors when no Gateway of ours uses
	// its targets, so the writer can remove the entries we wrote before.
	BackendTLSPolicies []BackendTLSPolicyStatus `json:"backendTLSPolicies,omitempty"`
	// ListenerSets holds the ListenerSets whose parent is one of our Gateways.
	ListenerSets []ListenerSetStatus `json:"listenerSets,omitempty"`
}

// BackendTLSPolicyStatus holds the ancestor statuses we own for a policy: one per Gateway of
// ours whose routes use a Service port it selects. The writer replaces the entries whose
// controllerName is ours and keeps the others.
type BackendTLSPolicyStatus struct {
	Namespace string                         `json:"namespace"`
	Name      string                         `json:"name"`
	Ancestors []gwapiv1.PolicyAncestorStatus `json:"ancestors,omitempty"`
}

// GatewayClassStatus is the computed status of one of our GatewayClasses.
type GatewayClassStatus struct {
	Name   string                     `json:"name"`
	Status gwapiv1.GatewayClassStatus `json:"status"`
}

// GatewayStatus is the computed status of one of our Gateways. Status.Addresses is left to
// whoever provisions the proxy Service.
type GatewayStatus struct {
	Namespace string                `json:"namespace"`
	Name      string                `json:"name"`
	Status    gwapiv1.GatewayStatus `json:"status"`
}

// HTTPRouteStatus holds the parent statuses we own for a route (an HTTPRoute or a GRPCRoute): one per parentRef naming one
// of our Gateways. The writer replaces the entries whose controllerName is ours and keeps the
// others.
type HTTPRouteStatus struct {
	Namespace string                      `json:"namespace"`
	Name      string                      `json:"name"`
	Parents   []gwapiv1.RouteParentStatus `json:"parents"`
}

// Status collects the computed status of every object in the graph.
func (g *Graph) Status() Status {
	var out Status
	for _, gc := range g.GatewayClasses {
		out.GatewayClasses = append(out.GatewayClasses, GatewayClassStatus{
			Name:   gc.Source.Name,
			Status: gwapiv1.GatewayClassStatus{Conditions: gc.Conditions, SupportedFeatures: gc.SupportedFeatures},
		})
	}
	for _, gw := range g.Gateways {
		out.Gateways = append(out.Gateways, gw.status())
	}
	for _, r := range g.HTTPRoutes {
		out.HTTPRoutes = append(out.HTTPRoutes, r.status(g.ControllerName))
	}
	for _, r := range g.GRPCRoutes {
		out.GRPCRoutes = append(out.GRPCRoutes, r.status(g.ControllerName))
	}
	for _, r := range g.TLSRoutes {
		out.TLSRoutes = append(out.TLSRoutes, r.status(g.ControllerName))
	}
	for _, r := range g.TCPRoutes {
		out.TCPRoutes = append(out.TCPRoutes, r.status(g.ControllerName))
	}
	for _, r := range g.UDPRoutes {
		out.UDPRoutes = append(out.UDPRoutes, r.status(g.ControllerName))
	}
	for _, p := range g.BackendTLSPolicies {
		out.BackendTLSPolicies = append(out.BackendTLSPolicies, p.status(g.ControllerName))
	}
	for _, ls := range g.ListenerSets {
		out.ListenerSets = append(out.ListenerSets, ls.status())
	}
	return out
}

// GatewaysStatus collects the computed status of the Gateways keep accepts and of the
// ListenerSets attached to them, and nothing else: what a status writer judges again when only
// those Gateways' proxies answered.
func (g *Graph) GatewaysStatus(keep func(*Gateway) bool) Status {
	var out Status
	for _, gw := range g.Gateways {
		if keep(gw) {
			out.Gateways = append(out.Gateways, gw.status())
		}
	}
	for _, ls := range g.ListenerSets {
		if keep(ls.Gateway) {
			out.ListenerSets = append(out.ListenerSets, ls.status())
		}
	}
	return out
}

func (gw *Gateway) status() GatewayStatus {
	st := GatewayStatus{Namespace: gw.Source.Namespace, Name: gw.Source.Name}
	st.Status.Conditions = gw.Conditions
	st.Status.AttachedListenerSets = gw.attachedListenerSets()
	for _, l := range gw.Listeners {
		st.Status.Listeners = append(st.Status.Listeners, l.status())
	}
	return st
}

// status is the listener's entry in its Gateway's (or, converted, its ListenerSet's) status.
func (l *Listener) status() gwapiv1.ListenerStatus {
	return gwapiv1.ListenerStatus{
		Name:           gwapiv1.SectionName(l.Name),
		SupportedKinds: l.SupportedKinds,
		AttachedRoutes: l.AttachedRoutes(),
		Conditions:     l.Conditions,
	}
}

func (r *HTTPRoute) status(controllerName gwapiv1.GatewayController) HTTPRouteStatus {
	st := HTTPRouteStatus{Namespace: r.Source.Namespace, Name: r.Source.Name}
	for _, p := range r.Parents {
		st.Parents = append(st.Parents, gwapiv1.RouteParentStatus{
			ParentRef: p.Ref, ControllerName: controllerName, Conditions: p.Conditions,
		})
	}
	return st
}
