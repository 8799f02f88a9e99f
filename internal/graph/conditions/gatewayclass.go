package conditions

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

const (
	classAccepted         = string(gwapiv1.GatewayClassConditionStatusAccepted)
	classSupportedVersion = string(gwapiv1.GatewayClassConditionStatusSupportedVersion)
)

// NewGatewayClassAccepted says the GatewayClass is ours and valid.
func NewGatewayClassAccepted() metav1.Condition {
	return truth(classAccepted, string(gwapiv1.GatewayClassReasonAccepted), "GatewayClass is accepted")
}

// NewGatewayClassInvalidParameters says the GatewayClass parametersRef cannot be used.
func NewGatewayClassInvalidParameters(msg string) metav1.Condition {
	return falsity(classAccepted, string(gwapiv1.GatewayClassReasonInvalidParameters), msg)
}

// NewGatewayClassSupportedVersion says the installed Gateway API CRDs are a version we support.
func NewGatewayClassSupportedVersion(version string) metav1.Condition {
	return truth(classSupportedVersion, string(gwapiv1.GatewayClassReasonSupportedVersion),
		fmt.Sprintf("Gateway API CRD bundle version %s is supported", version))
}

// NewGatewayClassUnsupportedVersion says the installed CRDs are a version we do not support.
func NewGatewayClassUnsupportedVersion(found, supported string) metav1.Condition {
	return falsity(classSupportedVersion, string(gwapiv1.GatewayClassReasonUnsupportedVersion),
		fmt.Sprintf("Gateway API CRD bundle version %q found, %s supported", found, supported))
}
