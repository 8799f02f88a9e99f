package graph

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"coxswain.dev/coxswain/internal/state"
)

// indexEndpointSlices maps each Service to its EndpointSlices (by the service-name label).
func indexEndpointSlices(cs *state.ClusterState) map[types.NamespacedName][]types.NamespacedName {
	out := map[types.NamespacedName][]types.NamespacedName{}
	for key, slice := range cs.EndpointSlices {
		svc := slice.Labels[discoveryv1.LabelServiceName]
		if svc == "" {
			continue
		}
		svcKey := types.NamespacedName{Namespace: key.Namespace, Name: svc}
		out[svcKey] = append(out[svcKey], key)
	}
	return out
}

// endpoints returns the ready endpoints of a Service port, sorted and deduplicated. The target
// port comes from the EndpointSlice port with the Service port's name, which is how a named
// targetPort resolves per Pod.
func (b *builder) endpoints(key ClusterKey) []Endpoint {
	svcKey := types.NamespacedName{Namespace: key.Namespace, Name: key.Name}
	sp := servicePort(b.cs.Services[svcKey], key.Port)
	var out []Endpoint
	for _, sliceKey := range b.slices[svcKey] {
		out = append(out, sliceEndpoints(b.cs.EndpointSlices[sliceKey], sp)...)
	}
	slices.SortFunc(out, func(x, y Endpoint) int {
		return cmp.Or(cmp.Compare(x.Address, y.Address), cmp.Compare(x.Port, y.Port))
	})
	return slices.Compact(out)
}

func sliceEndpoints(slice *discoveryv1.EndpointSlice, sp *corev1.ServicePort) []Endpoint {
	if slice.AddressType == discoveryv1.AddressTypeFQDN {
		return nil
	}
	port, ok := slicePort(slice, sp)
	if !ok {
		return nil
	}
	var out []Endpoint
	for _, ep := range slice.Endpoints {
		if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
			continue
		}
		for _, addr := range ep.Addresses {
			out = append(out, Endpoint{Address: addr, Port: port})
		}
	}
	return out
}

func slicePort(slice *discoveryv1.EndpointSlice, sp *corev1.ServicePort) (int32, bool) {
	for _, p := range slice.Ports {
		if deref(p.Name) != sp.Name || p.Port == nil {
			continue
		}
		if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
			continue
		}
		return *p.Port, true
	}
	return 0, false
}
