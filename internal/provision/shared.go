package provision

import (
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/internal/graph"
)

// SharedComponent is the value of ComponentLabel on the shared pool's pods (config/proxy) and on
// the Services of its Gateways.
const SharedComponent = "shared-proxy"

// GatewayNamespaceLabel is on the Service of a shared pool Gateway, which lives in the operator's
// namespace and not the Gateway's.
const GatewayNamespaceLabel = "gateway.coxswain.dev/gateway-namespace"

// SharedModel is everything DesiredSharedService reads for one shared pool Gateway.
type SharedModel struct {
	Gateway *gwapiv1.Gateway
	// Namespace is the operator's, where the shared pool runs and the Service lives.
	Namespace string
	// Name is the Service's name, wellknown.SharedGatewayServiceName of the Gateway.
	Name string
	// Ports maps each accepted listener port to the Gateway's internal port on the pool.
	Ports map[int32]int32
	// UDPPorts are the Ports whose listeners are UDP; the others are TCP.
	UDPPorts    map[int32]bool
	ServiceType corev1.ServiceType
	// LabelPrefixes and AnnotationPrefixes are the key prefixes of the Gateway's
	// spec.infrastructure metadata that reach the Service (Defaults.SharedLabelPrefixes and
	// SharedAnnotationPrefixes).
	LabelPrefixes, AnnotationPrefixes []string
}

// SharedModelOf returns the model of gw's Service on the shared pool, or false when gw gets
// none: it is dedicated, not accepted, or got no internal port.
func SharedModelOf(gw *graph.Gateway, namespace string, d Defaults) (SharedModel, bool) {
	if gw.Dedicated || !gw.Accepted || gw.SharedService == "" || len(gw.SharedPorts) == 0 {
		return SharedModel{}, false
	}
	return SharedModel{
		Gateway:     gw.Source,
		Namespace:   namespace,
		Name:        gw.SharedService,
		Ports:       maps.Clone(gw.SharedPorts),
		UDPPorts:    udpPorts(gw),
		ServiceType: defaultServiceType(d),

		LabelPrefixes:      d.SharedLabelPrefixes,
		AnnotationPrefixes: d.SharedAnnotationPrefixes,
	}, true
}

// udpPorts returns the ports of gw's accepted UDP listeners.
func udpPorts(gw *graph.Gateway) map[int32]bool {
	out := map[int32]bool{}
	for _, l := range gw.AllListeners() {
		if l.Accepted() && l.Protocol == gwapiv1.UDPProtocolType {
			out[l.Port] = true
		}
	}
	return out
}

// DesiredSharedService gives a shared pool Gateway its own address: it selects the pool's pods
// and maps each listener port to the internal port the pool serves that Gateway's listeners on.
// It lives in the operator's namespace (a Service selects pods of its own namespace only), so it
// has no owner reference: the provisioner deletes it when the Gateway no longer wants it. Its
// target ports are also the record of the Gateway's internal ports (see graph). Of the Gateway's
// spec.infrastructure metadata it carries only the keys of the allowed prefixes: whoever may
// write a Gateway must not choose what load balancers, external-dns or MetalLB read on a Service
// of the operator's namespace.
func DesiredSharedService(m SharedModel) *corev1.Service {
	listenerPorts := slices.Sorted(maps.Keys(m.Ports))
	ports := make([]corev1.ServicePort, 0, len(listenerPorts))
	for _, p := range listenerPorts {
		ports = append(ports, corev1.ServicePort{
			Name: portName(p), Protocol: portProtocol(m.UDPPorts, p), Port: p, TargetPort: intstr.FromInt32(m.Ports[p]),
		})
	}
	labels := map[string]string{}
	annotations := map[string]string{}
	if infra := m.Gateway.Spec.Infrastructure; infra != nil {
		for k, v := range infra.Labels {
			if hasPrefix(string(k), m.LabelPrefixes) {
				labels[string(k)] = string(v)
			}
		}
		for k, v := range infra.Annotations {
			if hasPrefix(string(k), m.AnnotationPrefixes) {
				annotations[string(k)] = string(v)
			}
		}
	}
	maps.Copy(labels, SharedSelector())
	labels[InstanceLabel] = m.Name
	labels[ManagedByLabel] = ManagedBy
	labels[GatewayNamespaceLabel] = m.Gateway.Namespace
	addGatewayLabels(labels, m.Gateway)
	annotations[graph.SharedServiceGatewayAnnotation] = m.Gateway.Namespace + "/" + m.Gateway.Name
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, Labels: labels, Annotations: annotations},
		Spec: corev1.ServiceSpec{
			Type:           m.ServiceType,
			Selector:       SharedSelector(),
			Ports:          ports,
			LoadBalancerIP: requestedIP(m.Gateway, m.ServiceType),
		},
	}
}

// SharedSelector selects the shared pool's pods, as config/proxy labels them.
func SharedSelector() map[string]string {
	return map[string]string{NameLabel: "coxswain", ComponentLabel: SharedComponent}
}

// IsSharedService reports whether svc is the Service of a shared pool Gateway that the operator
// made.
func IsSharedService(svc metav1.Object) bool {
	l := svc.GetLabels()
	return l[ManagedByLabel] == ManagedBy && l[ComponentLabel] == SharedComponent &&
		svc.GetAnnotations()[graph.SharedServiceGatewayAnnotation] != ""
}

// defaultServiceType is the operator-wide Service type, LoadBalancer when unset.
func defaultServiceType(d Defaults) corev1.ServiceType {
	if d.ServiceType != "" {
		return d.ServiceType
	}
	return corev1.ServiceTypeLoadBalancer
}

// hasPrefix reports whether key starts with one of prefixes.
func hasPrefix(key string, prefixes []string) bool {
	return slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(key, p) })
}
