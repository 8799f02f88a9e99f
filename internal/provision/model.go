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
	// HTTP1Engine is the proxy's HTTP/1.1 engine; the proxy's own default when empty.
	HTTP1Engine v1alpha1.HTTP1Engine
	// AccessLog is the proxy's access log format and fields; the proxy's own when nil.
	AccessLog *v1alpha1.AccessLog
	// Tracing is where the proxy sends its request spans; off when nil.
	Tracing *v1alpha1.Tracing
	// DiscoveryEndpoint is host:port of the controller's mTLS stream listener.
	DiscoveryEndpoint string
	// BootstrapEndpoint is host:port of the controller's bootstrap listener.
	BootstrapEndpoint string
	// ControllerNamespace and ControllerServiceAccount name the controller's identity, which the
	// proxy requires of the stream server.
	ControllerNamespace      string
	ControllerServiceAccount string
	// AllowedImages are the images a Gateway's own parameters may name (see ImageAllowed); the
	// image of a GatewayClass's parameters is always used.
	AllowedImages []string
	// AllowedTracingEndpoints are the collector URLs the tracing of a Gateway's own parameters
	// may name (see TracingEndpointAllowed); the tracing of a GatewayClass's parameters is
	// always used.
	AllowedTracingEndpoints []string
	// SharedLabelPrefixes and SharedAnnotationPrefixes are the key prefixes of a shared pool
	// Gateway's spec.infrastructure metadata that reach its Service in the operator's namespace;
	// no other key does.
	SharedLabelPrefixes      []string
	SharedAnnotationPrefixes []string
}

// Model is everything the Desired builders read for one dedicated proxy.
type Model struct {
	Gateway *gwapiv1.Gateway
	// Name names the ServiceAccount, Deployment, Service and PodDisruptionBudget.
	Name string
	// Ports are the distinct ports of the Gateway's accepted listeners, sorted; never an invalid
	// listener's.
	Ports []int32
	// UDPPorts are the Ports whose listeners are UDP: the Service and container ports of the
	// others are TCP.
	UDPPorts map[int32]bool
	// HealthPort serves /healthz, /readyz and /metrics; no listener of the Gateway, valid or not,
	// uses it.
	HealthPort int32
	Params     v1alpha1.CoxswainGatewayParametersSpec
	Defaults   Defaults
	// RefusedImage is the image of the Gateway's own parameters that Defaults.AllowedImages does
	// not list; the proxy runs the default image instead. Empty when none was refused.
	RefusedImage string
	// RefusedTracingEndpoint is the tracing endpoint of the Gateway's own parameters that
	// Defaults.AllowedTracingEndpoints does not admit; the proxy traces as Defaults.Tracing
	// says instead. Empty when none was refused.
	RefusedTracingEndpoint string
	// RefusedTolerations are the tolerations of the parameters that no proxy carries (see
	// allowedTolerations), whoever wrote them; the proxy carries the others.
	RefusedTolerations []corev1.Toleration
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
	udp := map[int32]bool{}
	for _, l := range gw.AllListeners() {
		all = append(all, l.Port)
		if l.Accepted() {
			ports = append(ports, l.Port)
			if l.Protocol == gwapiv1.UDPProtocolType {
				udp[l.Port] = true
			}
		}
	}
	slices.Sort(ports)
	ports = slices.Compact(ports)
	if len(ports) == 0 {
		return Model{}, false
	}
	m := Model{
		Gateway:    gw.Source,
		Name:       gw.ProxyName,
		Ports:      ports,
		UDPPorts:   udp,
		HealthPort: healthPort(all),
		Params:     *params.Spec.DeepCopy(),
		Defaults:   d,
	}
	own := ownParameters(gw.Source)
	if img := m.Params.Image; img != nil && own && !ImageAllowed(*img, d.AllowedImages) {
		m.RefusedImage, m.Params.Image = *img, nil
	}
	if tr := m.Params.Tracing; tr != nil && own && !TracingEndpointAllowed(tr.Endpoint, d.AllowedTracingEndpoints) {
		m.RefusedTracingEndpoint, m.Params.Tracing = tr.Endpoint, nil
	}
	m.Params.Tolerations, m.RefusedTolerations = allowedTolerations(m.Params.Tolerations)
	return m, true
}

// ownParameters reports whether gw names its parameters itself, rather than through its class.
func ownParameters(gw *gwapiv1.Gateway) bool {
	return gw.Spec.Infrastructure != nil && gw.Spec.Infrastructure.ParametersRef != nil
}

// ImageAllowed reports whether allowed lists image: exactly, or by a prefix ending with "*".
func ImageAllowed(image string, allowed []string) bool {
	ok, _ := listed(image, allowed)
	return ok
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

// http1Engine is the engine the parameters or the defaults name, empty for the proxy's own.
func (m Model) http1Engine() v1alpha1.HTTP1Engine {
	if m.Params.HTTP1Engine != nil {
		return *m.Params.HTTP1Engine
	}
	return m.Defaults.HTTP1Engine
}

// tracing returns where the proxy sends its request spans: the parameters' tracing when set,
// else the operator's default; nil for off.
func (m Model) tracing() *v1alpha1.Tracing {
	if m.Params.Tracing != nil {
		return m.Params.Tracing
	}
	return m.Defaults.Tracing
}

// accessLog returns the access log of the proxy: each field the parameters set, else the
// operator's default.
func (m Model) accessLog() v1alpha1.AccessLog {
	var out v1alpha1.AccessLog
	for _, a := range []*v1alpha1.AccessLog{m.Defaults.AccessLog, m.Params.AccessLog} {
		if a == nil {
			continue
		}
		if a.Format != nil {
			out.Format = a.Format
		}
		if a.Fields != nil {
			out.Fields = a.Fields
		}
	}
	return out
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
