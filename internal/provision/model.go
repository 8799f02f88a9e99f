package provision

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/internal/graph"
)

// FieldManager is the server-side apply field manager of every object the operator provisions.
const FieldManager = "coxswain"

// firstHealthPort is where the search for the proxy's health and metrics port starts.
const firstHealthPort int32 = 8081

// Defaults are the operator-wide settings a Gateway's parameters may override, and where its
// proxies find the controller.
type Defaults struct {
	Image     string
	Replicas  int32
	Resources corev1.ResourceRequirements
	// ServiceType is the type of the Services that give Gateways their addresses; LoadBalancer
	// when empty.
	ServiceType corev1.ServiceType
	// DiscoveryEndpoint is host:port of the controller's mTLS stream listener.
	DiscoveryEndpoint string
	// BootstrapEndpoint is host:port of the controller's bootstrap listener.
	BootstrapEndpoint string
	// ControllerNamespace and ControllerServiceAccount name the controller's identity, which the
	// proxy requires of the stream server.
	ControllerNamespace      string
	ControllerServiceAccount string
}

// Model is everything the Desired builders read for one dedicated proxy.
type Model struct {
	Gateway *gwapiv1.Gateway
	// Name names the ServiceAccount, Deployment, Service and PodDisruptionBudget.
	Name string
	// Ports are the distinct ports of the Gateway's accepted listeners, sorted; never an invalid
	// listener's.
	Ports []int32
	// HealthPort serves /healthz, /readyz and /metrics; no listener of the Gateway, valid or not,
	// uses it.
	HealthPort int32
	Params     v1alpha1.CoxswainGatewayParametersSpec
	Defaults   Defaults
}

// ModelOf returns the model of gw's dedicated proxy, or false when gw gets none: it is not
// dedicated, its proxy name was refused, or it is not accepted (a proxy of a Gateway that is
// not accepted would never receive a snapshot and stay NotReady). params is the
// CoxswainGatewayParameters gw.Parameters names.
func ModelOf(gw *graph.Gateway, params *v1alpha1.CoxswainGatewayParameters, d Defaults) (Model, bool) {
	if !gw.Dedicated || gw.ProxyName == "" || !gw.Accepted || params == nil {
		return Model{}, false
	}
	var ports, all []int32
	for _, l := range gw.AllListeners() {
		all = append(all, l.Port)
		if l.Accepted() {
			ports = append(ports, l.Port)
		}
	}
	slices.Sort(ports)
	ports = slices.Compact(ports)
	if len(ports) == 0 {
		return Model{}, false
	}
	return Model{
		Gateway:    gw.Source,
		Name:       gw.ProxyName,
		Ports:      ports,
		HealthPort: healthPort(all),
		Params:     *params.Spec.DeepCopy(),
		Defaults:   d,
	}, true
}

// healthPort returns the first port from firstHealthPort up that no listener uses.
func healthPort(listenerPorts []int32) int32 {
	p := firstHealthPort
	for slices.Contains(listenerPorts, p) {
		p++
	}
	return p
}

func (m Model) replicas() int32 {
	if m.Params.Replicas != nil {
		return *m.Params.Replicas
	}
	return m.Defaults.Replicas
}

func (m Model) image() string {
	if m.Params.Image != nil {
		return *m.Params.Image
	}
	return m.Defaults.Image
}

func (m Model) serviceType() corev1.ServiceType {
	if m.Params.ServiceType != nil {
		return *m.Params.ServiceType
	}
	return defaultServiceType(m.Defaults)
}

func (m Model) needsLowPorts() bool {
	return m.Ports[0] < 1024
}
