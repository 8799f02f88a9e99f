package status

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/discovery/server/cache"
)

// AppliedState says how far the proxies of a Gateway are with its current generation, as the
// discovery stream's ACKs and NACKs tell it.
type AppliedState int

const (
	// AppliedUnknown means nobody could judge: no judge is wired, or no proxy of the Gateway
	// streams from this replica. Programmed then rests on the proxy's readiness alone.
	AppliedUnknown AppliedState = iota
	// AppliedYes means every proxy judged acknowledged a snapshot that holds the generation.
	AppliedYes
	// AppliedPending means some proxy has not acknowledged such a snapshot yet.
	AppliedPending
	// AppliedRefused means some proxy refused (NACKed) a snapshot that holds the generation.
	AppliedRefused
)

// MaxProxyMessage bounds the message of a verdict as it goes into a Gateway's Programmed
// condition and event: it holds what proxies said (their node ID, the detail of a NACK), made
// printable and cut with printable.Text.
const MaxProxyMessage = 1024

// Applied is the verdict on one Gateway generation; Message says why, for the condition. It may
// hold a proxy's text: Programmed passes it through printable.Text.
type Applied struct {
	State   AppliedState
	Message string
}

// AppliedJudge judges whether the proxies serving scope applied generation of the Gateway
// gateway (the object of that uid).
type AppliedJudge func(scope cache.Scope, gateway types.NamespacedName, uid types.UID, generation int64) Applied

// newGatewayProgrammedPending says the Gateway's configuration is compiled and published but not
// yet acknowledged by its proxies: Unknown, as the spec asks while the controller lacks what it
// needs to tell whether Programmed is true.
func newGatewayProgrammedPending(msg string) metav1.Condition {
	return metav1.Condition{
		Type: string(gwapiv1.GatewayConditionProgrammed), Status: metav1.ConditionUnknown,
		Reason: string(gwapiv1.GatewayReasonPending), Message: msg,
	}
}

// newGatewayNotProgrammedRefused says a proxy refused the Gateway's configuration and keeps
// serving the one it had.
func newGatewayNotProgrammedRefused(msg string) metav1.Condition {
	return metav1.Condition{
		Type: string(gwapiv1.GatewayConditionProgrammed), Status: metav1.ConditionFalse,
		Reason: string(gwapiv1.GatewayReasonInvalid), Message: msg,
	}
}

// judged returns the Programmed condition a verdict makes of a True one, nil when it stays.
func judged(a Applied) *metav1.Condition {
	var c metav1.Condition
	switch a.State {
	case AppliedPending:
		c = newGatewayProgrammedPending(a.Message)
	case AppliedRefused:
		c = newGatewayNotProgrammedRefused(a.Message)
	default:
		return nil
	}
	return &c
}

// scopeOf is the discovery scope whose proxies serve a Gateway.
func scopeOf(src *gwapiv1.Gateway, proxy gatewayProxy) cache.Scope {
	if proxy.shared {
		return cache.SharedPool()
	}
	return cache.Gateway(src.Namespace, src.Name)
}
