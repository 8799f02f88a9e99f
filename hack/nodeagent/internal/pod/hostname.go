package pod

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// hostnameMaxLen is the kubelet's cap on a pod's hostname: 63 characters, one DNS label (and
// HOST_NAME_MAX of 64 bytes with its terminating NUL). sethostname(2) refuses anything longer
// than 64 with EINVAL.
const hostnameMaxLen = 63

// hostname is the hostname the pod's containers see, as the kubelet chooses it: the pod's
// spec.hostname when set, else its name, cut to 63 characters and stripped of a trailing '-' or
// '.' the cut left. A pod name may be a 253-character DNS subdomain (a Deployment named after a
// long Gateway makes such pods), and without the cut setting the hostname fails the container.
func hostname(pod *corev1.Pod) string {
	name := pod.Name
	if pod.Spec.Hostname != "" {
		name = pod.Spec.Hostname
	}
	if len(name) <= hostnameMaxLen {
		return name
	}
	return strings.TrimRight(name[:hostnameMaxLen], "-.")
}
