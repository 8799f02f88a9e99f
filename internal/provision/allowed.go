package provision

import (
	"net"
	"net/url"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"coxswain.dev/coxswain/internal/graph"
)

// ControlPlaneTaints are the taint keys of control-plane nodes: a proxy tolerates neither, so
// whoever writes a Gateway's parameters cannot place its pods beside the API server and etcd.
// config/admission refuses them too.
var ControlPlaneTaints = []string{"node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master"}

// metadataHosts are the names of cloud metadata services (GCE, AWS, Alibaba); their link-local
// and private addresses are the IP forms (169.254.169.254, fd00:ec2::254, 100.100.100.200).
var metadataHosts = []string{"metadata.google.internal", "metadata.goog", "metadata", "instance-data", "instance-data.ec2.internal"}

// metadataAddresses are cloud metadata services' addresses outside the link-local ranges.
var metadataAddresses = []string{"fd00:ec2::254", "100.100.100.200"}

// listed reports whether allowed lists value: exactly, or by a prefix ending with "*". exact
// says whether an entry is value itself.
func listed(value string, allowed []string) (ok, exact bool) {
	for _, a := range allowed {
		if a == value {
			return true, true
		}
		if prefix, isPrefix := strings.CutSuffix(a, "*"); isPrefix && strings.HasPrefix(value, prefix) {
			ok = true
		}
	}
	return ok, false
}

// TracingEndpointAllowed reports whether allowed lists endpoint, an OTLP collector URL: exactly,
// or by a prefix ending with "*" unless its host is internal (see InternalHost), which only an
// exact entry admits.
func TracingEndpointAllowed(endpoint string, allowed []string) bool {
	ok, exact := listed(endpoint, allowed)
	if exact || !ok {
		return ok
	}
	u, err := url.Parse(endpoint)
	return err == nil && u.Host != "" && !InternalHost(u.Hostname())
}

// RedactedEndpoint is endpoint for an event or a log line: without the password of its user
// information.
func RedactedEndpoint(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "(an endpoint that is not a URL)"
	}
	return u.Redacted()
}

// InternalHost reports whether host, a URL's host without its port, names the proxy's own node
// or pod, or a cloud metadata service, by its literal form: a loopback, link-local, unspecified
// or multicast address (IPv4-mapped too, or with a zone), a metadata service's address or name,
// localhost or a name under .localhost, or a number that is not a dotted IPv4 address
// ("2130706433", "0x7f.1", "127.1", which some resolvers read as addresses). A name that
// resolves to such an address is not caught: that takes the resolver, and the answer may
// change.
func InternalHost(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "" {
		return true
	}
	if ip := net.ParseIP(h); ip != nil || strings.Contains(h, ":") {
		return ip == nil || !graph.UsableAddress(h) || slices.ContainsFunc(metadataAddresses, func(a string) bool {
			return net.ParseIP(a).Equal(ip)
		})
	}
	if h == "localhost" || strings.HasSuffix(h, ".localhost") || slices.Contains(metadataHosts, h) {
		return true
	}
	last := h[strings.LastIndex(h, ".")+1:]
	return strings.HasPrefix(last, "0x") || strings.Trim(last, "0123456789") == ""
}

// allowedTolerations splits ts into those a proxy may carry and those it may not: a toleration
// of a control-plane taint, or one without a key, which tolerates every taint.
func allowedTolerations(ts []corev1.Toleration) (kept, refused []corev1.Toleration) {
	for _, t := range ts {
		if t.Key == "" || slices.Contains(ControlPlaneTaints, t.Key) {
			refused = append(refused, t)
		} else {
			kept = append(kept, t)
		}
	}
	return kept, refused
}
