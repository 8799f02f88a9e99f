package conditions

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

const (
	routeAccepted     = string(gwapiv1.RouteConditionAccepted)
	routeResolvedRefs = string(gwapiv1.RouteConditionResolvedRefs)
)

// NewRouteAccepted says the route is attached to the parent.
func NewRouteAccepted() metav1.Condition {
	return truth(routeAccepted, string(gwapiv1.RouteReasonAccepted), "Route is accepted")
}

// NewRouteNotAllowedByListeners says no matching listener allows the route's namespace or kind.
func NewRouteNotAllowedByListeners(msg string) metav1.Condition {
	return falsity(routeAccepted, string(gwapiv1.RouteReasonNotAllowedByListeners), msg)
}

// NewRouteNoMatchingListenerHostname says no hostname of the route intersects a listener's.
func NewRouteNoMatchingListenerHostname() metav1.Condition {
	return falsity(routeAccepted, string(gwapiv1.RouteReasonNoMatchingListenerHostname),
		"No listener hostname intersects the route's hostnames")
}

// NewRouteNoMatchingParent says sectionName or port select no listener of the Gateway.
func NewRouteNoMatchingParent(msg string) metav1.Condition {
	return falsity(routeAccepted, string(gwapiv1.RouteReasonNoMatchingParent), msg)
}

// NewRouteSnapshotSizeLimitReached says the route is not served through the parent: its copies
// in the snapshot of the parent's scope would take more than its namespace's share, or than the
// scope's routes may take together.
func NewRouteSnapshotSizeLimitReached(msg string) metav1.Condition {
	return falsity(routeAccepted, ReasonSnapshotSizeLimitReached, msg)
}

// NewRouteUnsupportedValue says the route uses a value or feature we do not support.
func NewRouteUnsupportedValue(msg string) metav1.Condition {
	return falsity(routeAccepted, string(gwapiv1.RouteReasonUnsupportedValue), msg)
}

// NewRouteIncompatibleFilters says a rule combines filters that cannot apply together.
func NewRouteIncompatibleFilters(msg string) metav1.Condition {
	return falsity(routeAccepted, string(gwapiv1.RouteReasonIncompatibleFilters), msg)
}

// NewRouteResolvedRefs says every backend and mirror reference resolved.
func NewRouteResolvedRefs() metav1.Condition {
	return truth(routeResolvedRefs, string(gwapiv1.RouteReasonResolvedRefs), "All references are resolved")
}

// NewRouteBackendNotFound says a referenced Service or port does not exist.
func NewRouteBackendNotFound(msg string) metav1.Condition {
	return falsity(routeResolvedRefs, string(gwapiv1.RouteReasonBackendNotFound), msg)
}

// NewRouteInvalidKind says a backendRef names a kind other than Service.
func NewRouteInvalidKind(msg string) metav1.Condition {
	return falsity(routeResolvedRefs, string(gwapiv1.RouteReasonInvalidKind), msg)
}

// NewRouteRefNotPermitted says a cross-namespace backendRef has no ReferenceGrant.
func NewRouteRefNotPermitted(msg string) metav1.Condition {
	return falsity(routeResolvedRefs, string(gwapiv1.RouteReasonRefNotPermitted), msg)
}

// NewRouteHostnameConflict says the route answers to a hostname that a route of the other kind
// (HTTPRoute or GRPCRoute) on the same listener answers to and was there first.
func NewRouteHostnameConflict(msg string) metav1.Condition {
	return falsity(routeAccepted, ReasonRouteHostnameConflict, msg)
}

// ReasonRouteHostnameConflict is the Accepted reason of NewRouteHostnameConflict, ours: the
// spec lets an implementation refuse one of an HTTPRoute and a GRPCRoute that share a hostname
// on a listener without naming a reason.
const ReasonRouteHostnameConflict = "HostnameConflict"
