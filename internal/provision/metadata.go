package provision

import (
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/discovery/wellknown"
)

// Labels every provisioned object carries. GatewayNameLabel is GEP-1762's; the selector uses
// the app.kubernetes.io labels, with the proxy name as the instance.
const (
	GatewayNameLabel  = "gateway.networking.k8s.io/gateway-name"
	GatewayClassLabel = "gateway.networking.k8s.io/gateway-class-name"
	NameLabel         = "app.kubernetes.io/name"
	ComponentLabel    = "app.kubernetes.io/component"
	InstanceLabel     = "app.kubernetes.io/instance"
	ManagedByLabel    = "app.kubernetes.io/managed-by"

	// ManagedBy is the value of ManagedByLabel on what the operator provisions.
	ManagedBy = "coxswain"
	// Component is the value of ComponentLabel on a dedicated proxy's objects.
	Component = "proxy"
)

// selector returns the labels that select the proxy's pods.
func (m Model) selector() map[string]string {
	return map[string]string{NameLabel: "coxswain", ComponentLabel: Component, InstanceLabel: m.Name}
}

// labels are the parameters' labels, then the Gateway's spec.infrastructure.labels, then ours,
// which no user label overrides.
func (m Model) labels() map[string]string {
	out := map[string]string{}
	maps.Copy(out, m.Params.Labels)
	if infra := m.Gateway.Spec.Infrastructure; infra != nil {
		for k, v := range infra.Labels {
			out[string(k)] = string(v)
		}
	}
	maps.Copy(out, m.selector())
	out[ManagedByLabel] = ManagedBy
	addGatewayLabels(out, m.Gateway)
	return out
}

// addGatewayLabels sets the labels that name gw and its class on an object provisioned for it.
// Both names may have 253 characters and a label value at most 63: a longer one is cut and ends
// with a short hash of the whole (wellknown.LabelValue), so it still tells Gateways apart.
func addGatewayLabels(labels map[string]string, gw *gwapiv1.Gateway) {
	labels[GatewayNameLabel] = wellknown.LabelValue(gw.Name)
	labels[GatewayClassLabel] = wellknown.LabelValue(string(gw.Spec.GatewayClassName))
}

// annotations are the parameters' annotations, then the Gateway's
// spec.infrastructure.annotations.
func (m Model) annotations() map[string]string {
	out := map[string]string{}
	maps.Copy(out, m.Params.Annotations)
	if infra := m.Gateway.Spec.Infrastructure; infra != nil {
		for k, v := range infra.Annotations {
			out[string(k)] = string(v)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// objectMeta is the metadata of every provisioned object: its name and namespace, labels,
// annotations and the Gateway as controlling owner, so deleting the Gateway collects it.
func (m Model) objectMeta() metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:            m.Name,
		Namespace:       m.Gateway.Namespace,
		Labels:          m.labels(),
		Annotations:     m.annotations(),
		OwnerReferences: []metav1.OwnerReference{OwnerOf(m.Gateway)},
	}
}

// OwnerOf is the controlling owner reference to gw.
func OwnerOf(gw *gwapiv1.Gateway) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         gwapiv1.GroupVersion.String(),
		Kind:               "Gateway",
		Name:               gw.Name,
		UID:                gw.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}
}
