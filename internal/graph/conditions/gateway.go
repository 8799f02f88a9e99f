package conditions

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

const (
	gatewayAccepted   = string(gwapiv1.GatewayConditionAccepted)
	gatewayProgrammed = string(gwapiv1.GatewayConditionProgrammed)
	gatewayResolved   = string(gwapiv1.GatewayConditionResolvedRefs)
)

// NewGatewayAccepted says the Gateway and all its listeners are valid.
func NewGatewayAccepted() metav1.Condition {
	return truth(gatewayAccepted, string(gwapiv1.GatewayReasonAccepted), "Gateway is accepted")
}

// NewGatewayAcceptedListenersNotValid says the Gateway is accepted with some invalid listeners.
func NewGatewayAcceptedListenersNotValid(msg string) metav1.Condition {
	return truth(gatewayAccepted, string(gwapiv1.GatewayReasonListenersNotValid), msg)
}

// NewGatewayNotAcceptedListenersNotValid says no listener of the Gateway is valid.
func NewGatewayNotAcceptedListenersNotValid(msg string) metav1.Condition {
	return falsity(gatewayAccepted, string(gwapiv1.GatewayReasonListenersNotValid), msg)
}

// NewGatewayInvalidParameters says spec.infrastructure.parametersRef cannot be used.
func NewGatewayInvalidParameters(msg string) metav1.Condition {
	return falsity(gatewayAccepted, string(gwapiv1.GatewayReasonInvalidParameters), msg)
}

// NewGatewayUnsupportedAddress says the Gateway requests addresses, which we cannot assign.
func NewGatewayUnsupportedAddress(msg string) metav1.Condition {
	return falsity(gatewayAccepted, string(gwapiv1.GatewayReasonUnsupportedAddress), msg)
}

// NewGatewayInvalid says the Gateway uses a field we do not support.
func NewGatewayInvalid(msg string) metav1.Condition {
	return falsity(gatewayAccepted, string(gwapiv1.GatewayReasonInvalid), msg)
}

// NewGatewayProxyNameConflict says the name of the Gateway's dedicated proxy is reserved or
// already taken, so no proxy is provisioned for it.
func NewGatewayProxyNameConflict(msg string) metav1.Condition {
	return falsity(gatewayAccepted, ReasonProxyNameConflict, msg)
}

// NewGatewayNamespaceLimitReached says the Gateway's namespace already has as many shared pool
// Gateways as allowed, all older, so this one is not served.
func NewGatewayNamespaceLimitReached(msg string) metav1.Condition {
	return falsity(gatewayAccepted, ReasonNamespaceLimitReached, msg)
}

// NewGatewayInvalidGatewayClass says the Gateway's class is ours but not accepted.
func NewGatewayInvalidGatewayClass() metav1.Condition {
	return falsity(gatewayAccepted, ReasonInvalidGatewayClass, "GatewayClass is not accepted")
}

// NewGatewayProgrammed says configuration for the Gateway was compiled for its proxies.
func NewGatewayProgrammed() metav1.Condition {
	return truth(gatewayProgrammed, string(gwapiv1.GatewayReasonProgrammed), "Gateway is programmed")
}

// NewGatewayNotProgrammedInvalid says the Gateway produces no configuration.
func NewGatewayNotProgrammedInvalid(msg string) metav1.Condition {
	return falsity(gatewayProgrammed, string(gwapiv1.GatewayReasonInvalid), msg)
}

// NewGatewayNotProgrammedAddressNotAssigned says the Gateway's proxy Service has no address yet.
func NewGatewayNotProgrammedAddressNotAssigned(msg string) metav1.Condition {
	return falsity(gatewayProgrammed, string(gwapiv1.GatewayReasonAddressNotAssigned), msg)
}

// NewGatewayNotProgrammedAddressNotUsable says an address of the Gateway's spec.addresses cannot
// be given to it.
func NewGatewayNotProgrammedAddressNotUsable(msg string) metav1.Condition {
	return falsity(gatewayProgrammed, string(gwapiv1.GatewayReasonAddressNotUsable), msg)
}

// NewGatewayNotProgrammedProxyNotReady says no replica of the Gateway's proxy is ready yet.
func NewGatewayNotProgrammedProxyNotReady(msg string) metav1.Condition {
	return falsity(gatewayProgrammed, ReasonProxyNotReady, msg)
}

// NewGatewayResolvedRefs says every Gateway-level reference (spec.tls) resolved.
func NewGatewayResolvedRefs() metav1.Condition {
	return truth(gatewayResolved, string(gwapiv1.GatewayReasonResolvedRefs), "All Gateway-level references are resolved")
}

// NewGatewayInvalidClientCertificateRef says spec.tls.backend.clientCertificateRef cannot be
// used: it is not a core Secret, does not exist or holds no valid certificate and key.
func NewGatewayInvalidClientCertificateRef(msg string) metav1.Condition {
	return falsity(gatewayResolved, string(gwapiv1.GatewayReasonInvalidClientCertificateRef), msg)
}

// NewGatewayRefNotPermitted says a Gateway-level reference names another namespace and no
// ReferenceGrant allows it.
func NewGatewayRefNotPermitted(msg string) metav1.Condition {
	return falsity(gatewayResolved, string(gwapiv1.GatewayReasonRefNotPermitted), msg)
}

// NewGatewayInsecureFrontendValidationMode says spec.tls.frontend lets some port accept clients
// without a valid certificate (mode AllowInsecureFallback).
func NewGatewayInsecureFrontendValidationMode(msg string) metav1.Condition {
	return truth(string(gwapiv1.GatewayConditionInsecureFrontendValidationMode), string(gwapiv1.GatewayReasonConfigurationChanged), msg)
}
