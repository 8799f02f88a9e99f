package service

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// Tests which Services get a load-balancer address: LoadBalancer ones without a class or of
// the class the agent is configured for.
func TestServesLB(t *testing.T) {
	t.Parallel()
	c := &Controller{cfg: Config{ServiceCIDR: serviceCIDR, LBPool: netip.MustParsePrefix("10.245.0.0/24"), LBClass: "example.com/local"}}
	for _, tc := range []struct {
		name  string
		typ   corev1.ServiceType
		class *string
		want  bool
	}{
		{"a LoadBalancer Service without a class is served", corev1.ServiceTypeLoadBalancer, nil, true},
		{"a LoadBalancer Service of the configured class is served", corev1.ServiceTypeLoadBalancer, ptr.To("example.com/local"), true},
		{"a LoadBalancer Service of another class is left to its controller", corev1.ServiceTypeLoadBalancer, ptr.To("example.com/cloud"), false},
		{"a ClusterIP Service gets no address", corev1.ServiceTypeClusterIP, nil, false},
		{"a NodePort Service gets no address", corev1.ServiceTypeNodePort, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			svc := &corev1.Service{Spec: corev1.ServiceSpec{Type: tc.typ, LoadBalancerClass: tc.class}}
			if got := c.servesLB(svc); got != tc.want {
				t.Errorf("servesLB = %v, want %v", got, tc.want)
			}
		})
	}
}

// Tests that a configuration with overlapping or unusable ranges is refused.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, cidr, pool string
		ok               bool
	}{
		{"the defaults are valid", "10.96.0.0/16", "10.245.0.0/24", true},
		{"a pool inside the service range is refused", "10.96.0.0/16", "10.96.1.0/24", false},
		{"a pool without room is refused", "10.96.0.0/16", "10.245.0.0/31", false},
		{"an IPv6 service range is refused", "fd00::/108", "10.245.0.0/24", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := Config{ServiceCIDR: netip.MustParsePrefix(tc.cidr), LBPool: netip.MustParsePrefix(tc.pool)}.Validate()
			if (err == nil) != tc.ok {
				t.Errorf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}
