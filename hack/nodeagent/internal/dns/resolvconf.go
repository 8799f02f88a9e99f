package dns

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// ResolvConf returns the /etc/resolv.conf of pod, as the kubelet writes it, or false when the
// pod gets none: policy Default (the node's resolvers, and the node has none to give), or no
// cluster DNS (nameserver empty) under a ClusterFirst policy.
//
// ClusterFirst (and ClusterFirstWithHostNet: host networking is not done) names the cluster's
// nameserver, searches <ns>.svc.<domain>, svc.<domain> and <domain>, with ndots:5; None takes
// everything from spec.dnsConfig, whose nameservers, searches and options are otherwise added.
func ResolvConf(pod *corev1.Pod, nameserver, domain string) (string, bool) {
	var servers, searches []string
	var options []corev1.PodDNSConfigOption
	switch pod.Spec.DNSPolicy {
	case corev1.DNSNone:
	case corev1.DNSDefault:
		return "", false
	default: // ClusterFirst, ClusterFirstWithHostNet, and empty as the API defaults it
		if nameserver == "" {
			return "", false
		}
		servers = []string{nameserver}
		searches = []string{pod.Namespace + ".svc." + domain, "svc." + domain, domain}
		options = []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("5")}}
	}
	if c := pod.Spec.DNSConfig; c != nil {
		servers = appendNew(servers, c.Nameservers...)
		searches = appendNew(searches, c.Searches...)
		options = mergeOptions(options, c.Options)
	}
	var b strings.Builder
	if len(searches) > 0 {
		b.WriteString("search " + strings.Join(searches, " ") + "\n")
	}
	for _, s := range servers {
		b.WriteString("nameserver " + s + "\n")
	}
	if len(options) > 0 {
		b.WriteString("options")
		for _, o := range options {
			b.WriteString(" " + o.Name)
			if o.Value != nil {
				b.WriteString(":" + *o.Value)
			}
		}
		b.WriteString("\n")
	}
	return b.String(), true
}

func appendNew(list []string, more ...string) []string {
	for _, m := range more {
		if !slices.Contains(list, m) {
			list = append(list, m)
		}
	}
	return list
}

// mergeOptions adds the pod's options; one of the same name replaces the default.
func mergeOptions(base, more []corev1.PodDNSConfigOption) []corev1.PodDNSConfigOption {
	out := append([]corev1.PodDNSConfigOption(nil), base...)
	for _, m := range more {
		replaced := false
		for i := range out {
			if out[i].Name == m.Name {
				out[i], replaced = m, true
			}
		}
		if !replaced {
			out = append(out, m)
		}
	}
	return out
}
