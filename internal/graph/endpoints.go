package graph

import (
	"cmp"
	"net/netip"
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
// targetPort resolves per Pod. Only slices of the Service's primary IP family count: a
// dual-stack Service has one slice family per IP family, and taking both would list every Pod
// twice (doubling its share of the traffic) and hand the proxy addresses of a family it may not
// reach.
func (b *builder) endpoints(key ClusterKey) []Endpoint {
	svcKey := types.NamespacedName{Namespace: key.Namespace, Name: key.Name}
	svc := b.cs.Services[svcKey]
	sp := servicePort(svc, key.Port)
	family := primaryAddressType(svc)
	var out []Endpoint
	for _, sliceKey := range b.slices[svcKey] {
		slice := b.cs.EndpointSlices[sliceKey]
		if slice.AddressType != family {
			continue
		}
		out = append(out, b.sliceEndpoints(svc, slice, sp)...)
	}
	slices.SortFunc(out, func(x, y Endpoint) int {
		return cmp.Or(cmp.Compare(x.Address, y.Address), cmp.Compare(x.Port, y.Port))
	})
	return slices.Compact(out)
}

// primaryAddressType is the EndpointSlice address type of a Service's primary IP family
// (spec.ipFamilies[0], which the API server sets on every Service with a cluster IP; IPv4 when
// unset, as for a headless Service created before dual-stack). FQDN slices never match.
func primaryAddressType(svc *corev1.Service) discoveryv1.AddressType {
	if svc != nil && len(svc.Spec.IPFamilies) > 0 && svc.Spec.IPFamilies[0] == corev1.IPv6Protocol {
		return discoveryv1.AddressTypeIPv6
	}
	return discoveryv1.AddressTypeIPv4
}

// sliceEndpoints returns the ready endpoints of a slice that a Service's traffic may reach:
// of a trusted origin (controllerManaged, podOfNamespace) and with a usable address.
func (b *builder) sliceEndpoints(svc *corev1.Service, slice *discoveryv1.EndpointSlice, sp *corev1.ServicePort) []Endpoint {
	port, ok := slicePort(slice, sp)
	if !ok {
		return nil
	}
	managed := b.opts.TrustAnyEndpointSlice || controllerManaged(svc, slice)
	var out []Endpoint
	for _, ep := range slice.Endpoints {
		if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
			continue
		}
		if !managed && !podOfNamespace(ep.TargetRef, svc) {
			continue
		}
		for _, addr := range ep.Addresses {
			if UsableAddress(addr) {
				out = append(out, Endpoint{Address: addr, Port: port})
			}
		}
	}
	return out
}

// endpointSliceController is the managed-by label value of the slices Kubernetes' EndpointSlice
// controller writes for Services with a selector.
const endpointSliceController = "endpointslice-controller.k8s.io"

// controllerManaged reports whether a slice carries the EndpointSlice controller's managed-by
// label for a Service with a selector. The label alone proves nothing (whoever may write a
// slice may set it), but the controller owns the slices of a Service with a selector and
// rewrites or deletes one with its label that it did not write; a selector-less Service's
// slices are never its own, so there the label is a forgery.
func controllerManaged(svc *corev1.Service, slice *discoveryv1.EndpointSlice) bool {
	return svc != nil && len(svc.Spec.Selector) > 0 && slice.Labels[discoveryv1.LabelManagedBy] == endpointSliceController
}

// podOfNamespace reports whether an endpoint's targetRef names a core Pod of the Service's own
// namespace: a hand-written slice (a selector-less Service's, or one mirrored from an Endpoints
// object) may send the Service's traffic to its own namespace's Pods, not to another
// namespace's or to a Node.
func podOfNamespace(ref *corev1.ObjectReference, svc *corev1.Service) bool {
	return ref != nil && svc != nil && ref.Kind == "Pod" && (ref.APIVersion == "" || ref.APIVersion == "v1") &&
		ref.Namespace == svc.Namespace
}

// UsableAddress reports whether an endpoint address may receive traffic: an IP address that is
// not loopback, link-local (169.254.0.0/16, fe80::/10: cloud metadata services and the node's
// own link), unspecified or multicast, in IPv4-mapped IPv6 form neither; never one with a zone.
func UsableAddress(s string) bool {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return false
	}
	a = a.Unmap()
	return !a.IsLoopback() && !a.IsLinkLocalUnicast() && !a.IsLinkLocalMulticast() && !a.IsUnspecified() && !a.IsMulticast()
}

// slicePort returns the port of a slice's endpoints for Service port sp: the slice port of the
// same name and protocol (TCP when unset, on either side).
func slicePort(slice *discoveryv1.EndpointSlice, sp *corev1.ServicePort) (int32, bool) {
	want := sp.Protocol
	if want == "" {
		want = corev1.ProtocolTCP
	}
	for _, p := range slice.Ports {
		if deref(p.Name) != sp.Name || p.Port == nil {
			continue
		}
		got := corev1.ProtocolTCP
		if p.Protocol != nil {
			got = *p.Protocol
		}
		if got != want {
			continue
		}
		return *p.Port, true
	}
	return 0, false
}
