package pod

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Tests that a pod's hostname is its spec.hostname or name cut to 63 characters, without a
// '-' or '.' the cut leaves at its end, as the kubelet chooses it.
func TestHostname(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 70)
	for _, tc := range []struct {
		name, podName, specHostname, want string
	}{
		{"a short name is kept", "web-5d8f7-abcde", "", "web-5d8f7-abcde"},
		{"a name of 63 characters is kept", long[:63], "", long[:63]},
		{"a name of 64 characters is cut to 63", long[:64], "", long[:63]},
		{"a long name is cut to 63", long, "", long[:63]},
		{"a '-' the cut leaves at the end is trimmed", long[:62] + "-x", "", long[:62]},
		{"several '-' and '.' the cut leaves are trimmed", long[:60] + "-.-bcd", "", long[:60]},
		{"a '-' inside the first 63 stays", long[:30] + "-" + long[:40], "", long[:30] + "-" + long[:32]},
		{"spec.hostname wins over the name", long, "db-0", "db-0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: tc.podName}, Spec: corev1.PodSpec{Hostname: tc.specHostname}}
			if got := hostname(pod); got != tc.want {
				t.Errorf("hostname of %q = %q, want %q", tc.podName, got, tc.want)
			}
		})
	}
}

// Tests that the pods of a Deployment named after a Gateway of the longest name Gateway API
// allows (253 characters, as its GatewayNameMaximumLength conformance test creates) get a
// hostname sethostname(2) and resolvers take: at most 63 characters, every dot-separated part a
// DNS label. As with the kubelet, a dot inside the first 63 characters stays.
func TestHostnameOfAPodNamedAfterTheLongestGateway(t *testing.T) {
	t.Parallel()
	for _, gateway := range []string{
		"gateway-" + strings.Repeat("a", 245),
		strings.Repeat("a", 60) + "." + strings.Repeat("b", 60) + "-" + strings.Repeat("c", 131),
		strings.Repeat("a", 62) + "-" + strings.Repeat("b", 190),
	} {
		if len(gateway) != validation.DNS1123SubdomainMaxLength || len(validation.IsDNS1123Subdomain(gateway)) != 0 {
			t.Fatalf("the gateway name %q is not a DNS subdomain of %d characters", gateway, validation.DNS1123SubdomainMaxLength)
		}
		// The ReplicaSet controller names a pod generateName (its name cut to leave room, then
		// '-') plus five random characters, keeping the name a DNS subdomain.
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: gateway[:253-6] + "-x7k2q"}}
		got := hostname(pod)
		if len(got) > hostnameMaxLen || len(got) == 0 {
			t.Errorf("hostname %q of pod %q has %d characters, want 1 to %d", got, pod.Name, len(got), hostnameMaxLen)
		}
		for label := range strings.SplitSeq(got, ".") {
			if errs := validation.IsDNS1123Label(label); len(errs) != 0 {
				t.Errorf("hostname %q of pod %q has the part %q that is not a DNS label: %v", got, pod.Name, label, errs)
			}
		}
		if !strings.HasPrefix(pod.Name, got) {
			t.Errorf("hostname %q is not the start of the pod's name %q", got, pod.Name)
		}
	}
}
