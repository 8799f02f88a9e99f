package conditions

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

const (
	listenerAccepted     = string(gwapiv1.ListenerConditionAccepted)
	listenerProgrammed   = string(gwapiv1.ListenerConditionProgrammed)
	listenerResolvedRefs = string(gwapiv1.ListenerConditionResolvedRefs)
	listenerConflicted   = string(gwapiv1.ListenerConditionConflicted)
	listenerOverlapTLS   = string(gwapiv1.ListenerConditionOverlappingTLSConfig)
)

// NewListenerDefaults returns the conditions of a valid listener; problems overwrite them with
// Upsert.
func NewListenerDefaults() []metav1.Condition {
	return []metav1.Condition{
		truth(listenerAccepted, string(gwapiv1.ListenerReasonAccepted), "Listener is accepted"),
		truth(listenerProgrammed, string(gwapiv1.ListenerReasonProgrammed), "Listener is programmed"),
		truth(listenerResolvedRefs, string(gwapiv1.ListenerReasonResolvedRefs), "All references are resolved"),
		falsity(listenerConflicted, string(gwapiv1.ListenerReasonNoConflicts), "No conflicts"),
	}
}

// NewListenerUnsupportedProtocol says the listener's protocol is not HTTP or HTTPS.
func NewListenerUnsupportedProtocol(msg string) metav1.Condition {
	return falsity(listenerAccepted, string(gwapiv1.ListenerReasonUnsupportedProtocol), msg)
}

// NewListenerUnsupportedValue says the listener sets a value we do not support.
func NewListenerUnsupportedValue(msg string) metav1.Condition {
	return falsity(listenerAccepted, string(gwapiv1.ListenerReasonUnsupportedValue), msg)
}

// NewListenerNotProgrammed says the listener produces no configuration.
func NewListenerNotProgrammed(msg string) metav1.Condition {
	return falsity(listenerProgrammed, string(gwapiv1.ListenerReasonInvalid), msg)
}

// NewListenerPortsExhausted says the listener's port got no internal port of the shared pool,
// so the pool does not serve it.
func NewListenerPortsExhausted(msg string) metav1.Condition {
	return falsity(listenerProgrammed, ReasonPortsExhausted, msg)
}

// NewListenerInvalidCertificateRef says a certificateRef is missing, of the wrong kind or malformed.
func NewListenerInvalidCertificateRef(msg string) metav1.Condition {
	return falsity(listenerResolvedRefs, string(gwapiv1.ListenerReasonInvalidCertificateRef), msg)
}

// NewListenerRefNotPermitted says a cross-namespace certificateRef has no ReferenceGrant.
func NewListenerRefNotPermitted(msg string) metav1.Condition {
	return falsity(listenerResolvedRefs, string(gwapiv1.ListenerReasonRefNotPermitted), msg)
}

// NewListenerInvalidRouteKinds says allowedRoutes.kinds names a kind we cannot attach.
func NewListenerInvalidRouteKinds(msg string) metav1.Condition {
	return falsity(listenerResolvedRefs, string(gwapiv1.ListenerReasonInvalidRouteKinds), msg)
}

// NewListenerProtocolConflict marks a listener sharing its port with another protocol. A
// conflicted listener is not accepted, so it comes with a matching Accepted condition.
func NewListenerProtocolConflict(msg string) []metav1.Condition {
	reason := string(gwapiv1.ListenerReasonProtocolConflict)
	return []metav1.Condition{truth(listenerConflicted, reason, msg), falsity(listenerAccepted, reason, msg)}
}

// NewListenerHostnameConflict marks a listener sharing port, protocol and hostname with another.
func NewListenerHostnameConflict(msg string) []metav1.Condition {
	reason := string(gwapiv1.ListenerReasonHostnameConflict)
	return []metav1.Condition{truth(listenerConflicted, reason, msg), falsity(listenerAccepted, reason, msg)}
}

// NewListenerOverlappingHostnames says another HTTPS listener on the port has an overlapping
// hostname, so connection coalescing may reach the wrong certificate.
func NewListenerOverlappingHostnames(msg string) metav1.Condition {
	return truth(listenerOverlapTLS, string(gwapiv1.ListenerReasonOverlappingHostnames), msg)
}

// NewListenerInvalidCACertificateRef says a frontend caCertificateRef names a missing ConfigMap,
// or one without a usable ca.crt.
func NewListenerInvalidCACertificateRef(msg string) metav1.Condition {
	return falsity(listenerResolvedRefs, string(gwapiv1.ListenerReasonInvalidCACertificateRef), msg)
}

// NewListenerInvalidCACertificateKind says a frontend caCertificateRef names a kind other than a
// core ConfigMap.
func NewListenerInvalidCACertificateKind(msg string) metav1.Condition {
	return falsity(listenerResolvedRefs, string(gwapiv1.ListenerReasonInvalidCACertificateKind), msg)
}

// NewListenerNoValidCACertificate says none of the frontend caCertificateRefs that apply to the
// listener is usable, so it cannot validate client certificates and serves nothing.
func NewListenerNoValidCACertificate(msg string) metav1.Condition {
	return falsity(listenerAccepted, string(gwapiv1.ListenerReasonNoValidCACertificate), msg)
}
