package dns

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestResolvConfFollowsThePodsDNSPolicyAndConfig(t *testing.T) {
	t.Parallel()
	const clusterFirst = "search web.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.244.0.1\noptions ndots:5\n"
	extra := &corev1.PodDNSConfig{
		Nameservers: []string{"10.244.0.9"},
		Searches:    []string{"example.internal"},
		Options:     []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("2")}, {Name: "edns0"}},
	}
	for _, tc := range []struct {
		name       string
		policy     corev1.DNSPolicy
		config     *corev1.PodDNSConfig
		nameserver string
		want       string
		ok         bool
	}{
		{"ClusterFirst names the cluster nameserver and the namespace's search path", corev1.DNSClusterFirst, nil, "10.244.0.1", clusterFirst, true},
		{"an empty policy is ClusterFirst", "", nil, "10.244.0.1", clusterFirst, true},
		{"ClusterFirstWithHostNet is ClusterFirst without host networking", corev1.DNSClusterFirstWithHostNet, nil, "10.244.0.1", clusterFirst, true},
		{"ClusterFirst without cluster DNS writes nothing", corev1.DNSClusterFirst, nil, "", "", false},
		{"Default writes nothing", corev1.DNSDefault, nil, "10.244.0.1", "", false},
		{
			"dnsConfig adds to ClusterFirst and overrides an option", corev1.DNSClusterFirst, extra, "10.244.0.1",
			"search web.svc.cluster.local svc.cluster.local cluster.local example.internal\nnameserver 10.244.0.1\nnameserver 10.244.0.9\noptions ndots:2 edns0\n", true,
		},
		{
			"None takes only dnsConfig", corev1.DNSNone, extra, "10.244.0.1",
			"search example.internal\nnameserver 10.244.0.9\noptions ndots:2 edns0\n", true,
		},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "web"}, Spec: corev1.PodSpec{DNSPolicy: tc.policy, DNSConfig: tc.config}}
		got, ok := ResolvConf(pod, tc.nameserver, "cluster.local")
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: got %v %q, want %v %q", tc.name, ok, got, tc.ok, tc.want)
		}
	}
}

func TestCorefileServesTheClusterDomainOnTheBridgeAddress(t *testing.T) {
	t.Parallel()
	s := &Server{Address: "10.244.0.1", Domain: "cluster.local", Kubeconfig: "/state/admin.kubeconfig"}
	got, err := s.Corefile()
	if err != nil {
		t.Fatal(err)
	}
	want := `cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {
    bind 10.244.0.1
    errors
    ready 10.244.0.1:8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig "/state/admin.kubeconfig"
    }
}
`
	if got != want {
		t.Errorf("Corefile:\n%s\nwant:\n%s", got, want)
	}
}
