package graph

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/graph/conditions"
	"coxswain.dev/coxswain/internal/state"
)

// Gateway is a Gateway of one of our classes.
type Gateway struct {
	Source *gwapiv1.Gateway
	Class  *GatewayClass
	// Accepted is true when the Gateway produces configuration: its class is accepted, its
	// parameters resolve and at least one listener is accepted.
	Accepted bool
	// Dedicated is true when the Gateway (or its class) references a CoxswainGatewayParameters
	// and so is served by its own proxy named ProxyName instead of the shared pool.
	Dedicated bool
	// ProxyName names the dedicated proxy's ServiceAccount, Deployment and Service; empty when
	// the Gateway is not dedicated or its proxy name is refused (see refuseProxyNameConflicts).
	ProxyName string
	// Parameters is the CoxswainGatewayParameters of a dedicated Gateway: its own
	// spec.infrastructure.parametersRef, else its class's.
	Parameters types.NamespacedName
	// SharedService names the Service, in the operator's namespace, that gives an accepted shared
	// pool Gateway its own address; empty for every other Gateway.
	SharedService string
	// SharedPorts maps each accepted listener port of a shared pool Gateway to the internal port
	// the pool binds its listeners on (see allocateSharedPorts); nil for every other Gateway.
	SharedPorts map[int32]int32
	Listeners   []*Listener
	// BackendClientCertificate is the kubernetes.io/tls Secret of spec.tls.backend
	// .clientCertificateRef, which the Gateway's proxies present to backends they reach over TLS;
	// nil when unset or unusable.
	BackendClientCertificate *corev1.Secret
	// Conditions are the Gateway-level conditions, final once Build returns.
	Conditions []metav1.Condition
	// problem is the Gateway-level reason not to accept it, found before listeners are built.
	problem *metav1.Condition
	// order is the Gateway's index among the build's Gateways in key order.
	order int
	// resolvedRefs is the ResolvedRefs condition of the Gateway-level references (spec.tls);
	// nil when the Gateway has none.
	resolvedRefs *metav1.Condition
	// listenerSets are the ListenerSets attached to the Gateway, in precedence order.
	listenerSets []*ListenerSet
}

// Key returns the Gateway's namespace/name.
func (gw *Gateway) Key() types.NamespacedName {
	return state.Key(gw.Source)
}

func (b *builder) buildGateways() []*Gateway {
	var out []*Gateway
	for _, key := range sortedKeys(b.cs.Gateways) {
		src := b.cs.Gateways[key]
		class, ours := b.classes[string(src.Spec.GatewayClassName)]
		if !ours {
			continue
		}
		gw := b.newGateway(src, class)
		gw.order = len(out)
		b.gateways[key] = gw
		out = append(out, gw)
	}
	b.gatewayList = out
	return out
}

func (b *builder) newGateway(src *gwapiv1.Gateway, class *GatewayClass) *Gateway {
	gw := &Gateway{Source: src, Class: class, Dedicated: class.Dedicated, Parameters: class.Parameters}
	gw.problem = b.gatewayProblem(gw)
	if gw.Dedicated {
		gw.ProxyName = wellknown.DedicatedProxyName(src.Name, class.Source.Name)
	}
	gw.Listeners = b.buildListeners(gw)
	b.resolveBackendClientCertificate(gw)
	return gw
}

// gatewayProblem returns the condition that keeps the Gateway from being accepted whatever its
// listeners, or nil. It sets gw.Dedicated when the Gateway names valid parameters.
func (b *builder) gatewayProblem(gw *Gateway) *metav1.Condition {
	spec := gw.Source.Spec
	if !gw.Class.Accepted {
		return ptr(conditions.NewGatewayInvalidGatewayClass())
	}
	if spec.Infrastructure != nil && spec.Infrastructure.ParametersRef != nil {
		if msg := b.checkGatewayParameters(gw.Source.Namespace, spec.Infrastructure.ParametersRef); msg != "" {
			return ptr(conditions.NewGatewayInvalidParameters(msg))
		}
		gw.Dedicated = true
		gw.Parameters = types.NamespacedName{Namespace: gw.Source.Namespace, Name: spec.Infrastructure.ParametersRef.Name}
	}
	if msg := unsupportedAddress(spec.Addresses); msg != "" {
		return ptr(conditions.NewGatewayUnsupportedAddress(msg))
	}
	return nil
}

// unsupportedAddress returns why an entry of spec.addresses cannot be requested, or "". Only
// IPAddress entries (the default type) are: their value is asked of the load balancer through the
// proxy Service (see RequestedAddresses). An entry with an empty value asks for nothing
// (GatewayAddressEmpty) and is accepted.
func unsupportedAddress(addresses []gwapiv1.GatewaySpecAddress) string {
	for _, a := range addresses {
		if t := addressType(a); t != gwapiv1.IPAddressType {
			return fmt.Sprintf("spec.addresses: type %q is not supported, only %s", t, gwapiv1.IPAddressType)
		}
		if a.Value == "" {
			continue
		}
		if _, err := netip.ParseAddr(a.Value); err != nil {
			return fmt.Sprintf("spec.addresses: %q is not an IP address", a.Value)
		}
	}
	return ""
}

// RequestedAddresses returns the IP addresses spec.addresses of gw asks for, in order, without
// the entries of an empty value.
func RequestedAddresses(gw *gwapiv1.Gateway) []string {
	var out []string
	for _, a := range gw.Spec.Addresses {
		if addressType(a) == gwapiv1.IPAddressType && a.Value != "" {
			out = append(out, a.Value)
		}
	}
	return out
}

func addressType(a gwapiv1.GatewaySpecAddress) gwapiv1.AddressType {
	if a.Type == nil || *a.Type == "" {
		return gwapiv1.IPAddressType
	}
	return *a.Type
}

func (b *builder) checkGatewayParameters(namespace string, ref *gwapiv1.LocalParametersReference) string {
	if !isParametersKind(ref.Group, ref.Kind) {
		return fmt.Sprintf("parametersRef must be %s/%s, not %s/%s",
			state.GatewayParametersGroup, state.GatewayParametersKind, ref.Group, ref.Kind)
	}
	key := types.NamespacedName{Namespace: namespace, Name: ref.Name}
	if _, ok := b.cs.GatewayParameters[key]; !ok {
		return fmt.Sprintf("CoxswainGatewayParameters %s not found", key)
	}
	return ""
}

// finish computes the Gateway conditions and listener statuses once routes are attached.
func (gw *Gateway) finish() {
	accepted := gw.acceptedCondition()
	gw.Accepted = accepted.Status == metav1.ConditionTrue
	programmed := conditions.NewGatewayProgrammed()
	if !gw.Accepted {
		programmed = conditions.NewGatewayNotProgrammedInvalid("Gateway is not accepted")
	} else if !gw.anyListener((*Listener).Programmed) {
		programmed = conditions.NewGatewayNotProgrammedInvalid("No listener is programmed")
	}
	conds := []metav1.Condition{accepted, programmed}
	if gw.resolvedRefs != nil {
		conds = append(conds, *gw.resolvedRefs)
	}
	if c := insecureFrontendValidation(gw.Source.Spec); c != nil {
		conds = append(conds, *c)
	}
	gw.Conditions = conditions.Stamp(conds, gw.Source.Generation)
	for _, l := range gw.Listeners {
		l.finish(gw.Accepted)
	}
}

func (gw *Gateway) acceptedCondition() metav1.Condition {
	if gw.problem != nil {
		return *gw.problem
	}
	var bad []string
	for _, l := range gw.Listeners {
		if !l.Accepted() {
			bad = append(bad, l.Name)
		}
	}
	switch {
	case len(bad) == 0:
		return conditions.NewGatewayAccepted()
	case len(bad) == len(gw.Listeners):
		return conditions.NewGatewayNotAcceptedListenersNotValid("No listener is valid")
	}
	return conditions.NewGatewayAcceptedListenersNotValid("Listeners not valid: " + strings.Join(bad, ", "))
}

func (gw *Gateway) anyListener(pred func(*Listener) bool) bool {
	for _, l := range gw.Listeners {
		if pred(l) {
			return true
		}
	}
	return false
}

func ptr[T any](v T) *T {
	return &v
}
