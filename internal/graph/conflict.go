package graph

import (
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/internal/graph/conditions"
)

// markConflicts finds the listeners of one Gateway that cannot be told apart: listeners on one
// port with different protocols, and listeners sharing port, protocol and hostname. The spec
// forbids picking a winner, so every conflicted listener is rejected.
func markConflicts(ls []*Listener) {
	byPort := map[int32][]*Listener{}
	for _, l := range ls {
		byPort[l.Port] = append(byPort[l.Port], l)
	}
	for port, group := range byPort {
		if protocols := protocolsOf(group); len(protocols) > 1 {
			msg := fmt.Sprintf("Port %d is used with protocols %v", port, protocols)
			for _, l := range group {
				l.conflict(conditions.NewListenerProtocolConflict(msg))
			}
			continue
		}
		markHostnameConflicts(group)
	}
}

// protocolsOf returns the protocols of ls. TLS listeners in Passthrough and in Terminate mode
// may share a port (mixed termination): the server name of a connection's ClientHello picks
// its listener before anything is decrypted, so their hostnames are what must differ.
func protocolsOf(ls []*Listener) []string {
	var out []string
	for _, l := range ls {
		out = append(out, string(l.Protocol))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func markHostnameConflicts(sameProtocol []*Listener) {
	byHost := map[string][]*Listener{}
	for _, l := range sameProtocol {
		byHost[l.Hostname] = append(byHost[l.Hostname], l)
	}
	for host, group := range byHost {
		if len(group) < 2 {
			continue
		}
		msg := fmt.Sprintf("Hostname %q is used by several listeners on port %d", host, group[0].Port)
		for _, l := range group {
			l.conflict(conditions.NewListenerHostnameConflict(msg))
		}
	}
}

func (l *Listener) conflict(conds []metav1.Condition) {
	l.accepted, l.programmed = false, false
	for _, c := range conds {
		l.Conditions = conditions.Upsert(l.Conditions, c)
	}
	l.Conditions = conditions.Upsert(l.Conditions, conditions.NewListenerNotProgrammed("Listener is conflicted"))
}

// markOverlappingTLS flags HTTPS listeners on one port whose hostnames overlap, where
// connection coalescing could reuse one listener's certificate for the other's host.
func markOverlappingTLS(ls []*Listener) {
	for i, a := range ls {
		for _, b := range ls[i+1:] {
			if a.Protocol != gwapiv1.HTTPSProtocolType || b.Protocol != a.Protocol || a.Port != b.Port {
				continue
			}
			if a.Hostname != b.Hostname && overlaps(a.Hostname, b.Hostname) {
				a.overlap(b)
				b.overlap(a)
			}
		}
	}
}

func (l *Listener) overlap(other *Listener) {
	msg := fmt.Sprintf("Hostname overlaps listener %s", other.Name)
	l.Conditions = conditions.Upsert(l.Conditions, conditions.NewListenerOverlappingHostnames(msg))
}

func overlaps(a, b string) bool {
	return HostnameMatches(a, b) || HostnameMatches(b, a)
}
