package conditions

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

const (
	policyAccepted     = string(gwapiv1.PolicyConditionAccepted)
	policyResolvedRefs = string(gwapiv1.BackendTLSPolicyConditionResolvedRefs)
)

// NewPolicyAccepted says the BackendTLSPolicy applies to its target.
func NewPolicyAccepted() metav1.Condition {
	return truth(policyAccepted, string(gwapiv1.PolicyReasonAccepted), "Policy is accepted")
}

// NewPolicyConflicted says an older policy (or the first by namespace/name) already selects the
// same target and section.
func NewPolicyConflicted(msg string) metav1.Condition {
	return falsity(policyAccepted, string(gwapiv1.PolicyReasonConflicted), msg)
}

// NewPolicyInvalid says the policy asks for something we do not support, such as a
// wellKnownCACertificates value other than System.
func NewPolicyInvalid(msg string) metav1.Condition {
	return falsity(policyAccepted, string(gwapiv1.PolicyReasonInvalid), msg)
}

// NewPolicyNoValidCACertificate says none of the policy's caCertificateRefs is usable.
func NewPolicyNoValidCACertificate(msg string) metav1.Condition {
	return falsity(policyAccepted, string(gwapiv1.BackendTLSPolicyReasonNoValidCACertificate), msg)
}

// NewPolicyResolvedRefs says every caCertificateRef resolved to a usable CA certificate.
func NewPolicyResolvedRefs() metav1.Condition {
	return truth(policyResolvedRefs, string(gwapiv1.BackendTLSPolicyReasonResolvedRefs), "All references are resolved")
}

// NewPolicyInvalidCACertificateRef says a caCertificateRef names a missing ConfigMap, or one
// without a usable ca.crt.
func NewPolicyInvalidCACertificateRef(msg string) metav1.Condition {
	return falsity(policyResolvedRefs, string(gwapiv1.BackendTLSPolicyReasonInvalidCACertificateRef), msg)
}

// NewPolicyInvalidKind says a caCertificateRef names a kind other than a core ConfigMap.
func NewPolicyInvalidKind(msg string) metav1.Condition {
	return falsity(policyResolvedRefs, string(gwapiv1.BackendTLSPolicyReasonInvalidKind), msg)
}
