package e2e

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/discovery/wellknown"
)

// GatewayClass returns a GatewayClass that Coxswain serves.
func GatewayClass(name string) *gwapiv1.GatewayClass {
	return &gwapiv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       gwapiv1.GatewayClassSpec{ControllerName: wellknown.GatewayControllerName},
	}
}

// Gateway returns a shared pool Gateway of class with one HTTP listener named "http" on port.
func Gateway(namespace, name, class string, port int32) *gwapiv1.Gateway {
	return &gwapiv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: gwapiv1.GatewaySpec{
			GatewayClassName: gwapiv1.ObjectName(class),
			Listeners: []gwapiv1.Listener{{
				Name: "http", Port: port, Protocol: gwapiv1.HTTPProtocolType,
			}},
		},
	}
}

// BackendService returns a Service with a port named "http" on port 80, and the EndpointSlice
// that sends it to b, with the targetRef to a Pod of the Service's namespace that the
// controller requires of a hand-written slice (spec.backends.endpointSlices Verified).
func BackendService(namespace, name string, b *Backend) (*corev1.Service, *discoveryv1.EndpointSlice) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
			Name: "http", Port: 80, TargetPort: intstr.FromInt32(b.Port), Protocol: corev1.ProtocolTCP,
		}}},
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: name + "-e2e",
			Labels: map[string]string{
				discoveryv1.LabelServiceName: name,
				discoveryv1.LabelManagedBy:   "e2e.coxswain.dev",
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{BackendAddress},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: namespace, Name: name + "-backend"},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(b.Port), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	return svc, slice
}

// Route describes an HTTPRoute with one rule.
type Route struct {
	Namespace, Name string
	Gateway         string
	Hostname        string
	PathPrefix      string
	// AddHeader is added to every request by a RequestHeaderModifier filter, when set.
	AddHeader, AddValue string
	Service             string
}

// HTTPRoute returns the HTTPRoute r describes, to port 80 of r.Service.
func HTTPRoute(r Route) *gwapiv1.HTTPRoute {
	rule := gwapiv1.HTTPRouteRule{
		Matches: []gwapiv1.HTTPRouteMatch{{Path: &gwapiv1.HTTPPathMatch{
			Type: ptr.To(gwapiv1.PathMatchPathPrefix), Value: ptr.To(r.PathPrefix),
		}}},
		BackendRefs: []gwapiv1.HTTPBackendRef{{BackendRef: gwapiv1.BackendRef{
			BackendObjectReference: gwapiv1.BackendObjectReference{Name: gwapiv1.ObjectName(r.Service), Port: ptr.To[gwapiv1.PortNumber](80)},
		}}},
	}
	if r.AddHeader != "" {
		rule.Filters = []gwapiv1.HTTPRouteFilter{{
			Type: gwapiv1.HTTPRouteFilterRequestHeaderModifier,
			RequestHeaderModifier: &gwapiv1.HTTPHeaderFilter{Add: []gwapiv1.HTTPHeader{{
				Name: gwapiv1.HTTPHeaderName(r.AddHeader), Value: r.AddValue,
			}}},
		}}
	}
	return &gwapiv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: r.Name},
		Spec: gwapiv1.HTTPRouteSpec{
			CommonRouteSpec: gwapiv1.CommonRouteSpec{ParentRefs: []gwapiv1.ParentReference{{Name: gwapiv1.ObjectName(r.Gateway)}}},
			Hostnames:       []gwapiv1.Hostname{gwapiv1.Hostname(r.Hostname)},
			Rules:           []gwapiv1.HTTPRouteRule{rule},
		},
	}
}
