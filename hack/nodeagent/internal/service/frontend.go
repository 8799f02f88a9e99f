package service

import (
	"cmp"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Frontend is an address and port the proxy serves and the endpoints it forwards to.
type Frontend struct {
	Addr     netip.AddrPort
	Protocol corev1.Protocol
	// Backends are the ready endpoints, sorted; a frontend without any is not served, so
	// that a connection to it is refused.
	Backends []netip.AddrPort
}

// Frontends are what the proxy serves for svc: each port of the Service on its ClusterIP
// (when it is one of serviceCIDR) and on lbIP (when valid), forwarding to the ready endpoints
// of the slices eps for that port. TCP and UDP ports are served; SCTP ones are returned apart.
func Frontends(svc *corev1.Service, serviceCIDR netip.Prefix, lbIP netip.Addr, eps []*discoveryv1.EndpointSlice) (fs []Frontend, unserved []corev1.ServicePort) {
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(svc.Spec.ClusterIP); err == nil && serviceCIDR.Contains(ip) {
		addrs = append(addrs, ip)
	}
	if lbIP.IsValid() {
		addrs = append(addrs, lbIP)
	}
	if len(addrs) == 0 || svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil, nil
	}
	for _, sp := range svc.Spec.Ports {
		protocol := sp.Protocol
		if protocol == "" {
			protocol = corev1.ProtocolTCP
		}
		if protocol != corev1.ProtocolTCP && protocol != corev1.ProtocolUDP {
			unserved = append(unserved, sp)
			continue
		}
		backends := ReadyBackends(eps, sp.Name, protocol)
		for _, a := range addrs {
			fs = append(fs, Frontend{Addr: netip.AddrPortFrom(a, uint16(sp.Port)), Protocol: protocol, Backends: backends}) //nolint:gosec // the API server keeps ports in 1-65535
		}
	}
	return fs, unserved
}

// ReadyBackends are the addresses and ports of the ready, not terminating, IPv4 endpoints of
// eps for the Service port named portName (the slices carry the port numbers each target
// port resolved to, by name or number), sorted and without duplicates.
func ReadyBackends(eps []*discoveryv1.EndpointSlice, portName string, protocol corev1.Protocol) []netip.AddrPort {
	var out []netip.AddrPort
	for _, s := range eps {
		if s.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		port, ok := slicePort(s, portName, protocol)
		if !ok {
			continue
		}
		for _, ep := range s.Endpoints {
			if !usable(ep) {
				continue
			}
			// The addresses of an endpoint are fungible: the first one stands for it.
			if ip, err := netip.ParseAddr(ep.Addresses[0]); err == nil && ip.Is4() {
				out = append(out, netip.AddrPortFrom(ip, port))
			}
		}
	}
	slicesSortCompact(&out)
	return out
}

func slicePort(s *discoveryv1.EndpointSlice, name string, protocol corev1.Protocol) (uint16, bool) {
	for _, p := range s.Ports {
		pname, pproto := "", corev1.ProtocolTCP
		if p.Name != nil {
			pname = *p.Name
		}
		if p.Protocol != nil {
			pproto = *p.Protocol
		}
		if pname == name && pproto == protocol && p.Port != nil && *p.Port > 0 && *p.Port < 65536 {
			return uint16(*p.Port), true
		}
	}
	return 0, false
}

// usable says whether an endpoint takes new connections: ready (unknown counts as ready, as
// the API says) and not terminating.
func usable(ep discoveryv1.Endpoint) bool {
	c := ep.Conditions
	return len(ep.Addresses) > 0 && (c.Ready == nil || *c.Ready) && (c.Terminating == nil || !*c.Terminating)
}

func slicesSortCompact(s *[]netip.AddrPort) {
	slices.SortFunc(*s, func(a, b netip.AddrPort) int {
		return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Port(), b.Port()))
	})
	*s = slices.Compact(*s)
}
