package service

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
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

// Tests spec.loadBalancerIP: a free address of the pool is given and written to the status,
// moving the Service off the address it held; one outside the pool, the pool's broadcast address,
// one another Service holds or a malformed one leaves the Service without an address, with one
// warning event per reason; dropping the request gives the Service an address again.
func TestRequestedAddress(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	lb := func(name, req string) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerIP: req},
		}
	}
	other, gw := lb("other", ""), lb("gw", "")
	client := fake.NewClientset(other, gw)
	c, err := New(client, Config{ServiceCIDR: serviceCIDR, LBPool: netip.MustParsePrefix("10.245.0.0/24")}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string) *corev1.Service {
		svc, err := client.CoreV1().Services("ns").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}
	ingress := func(name string) string {
		if in := get(name).Status.LoadBalancer.Ingress; len(in) == 1 {
			return in[0].IP
		}
		return ""
	}
	ensure := func(name, req string) netip.Addr {
		t.Helper()
		svc := get(name)
		svc.Spec.LoadBalancerIP = req
		a, err := c.ensureAddress(ctx, "ns/"+name, svc)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	events := func() int {
		list, err := client.CoreV1().Events("ns").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return len(list.Items)
	}

	if a := ensure("other", ""); a != netip.MustParseAddr("10.245.0.1") {
		t.Fatalf("other got %s, want the first address of the pool", a)
	}
	if a := ensure("gw", ""); !a.IsValid() || ingress("gw") != a.String() {
		t.Fatalf("gw got %s, status %q", a, ingress("gw"))
	}
	for i, tc := range []struct{ name, req, why string }{
		{"outside the pool", "192.0.2.1", "outside the load-balancer pool"},
		{"the broadcast address", "10.245.0.255", "network or broadcast"},
		{"held by another Service", "10.245.0.1", "held by Service ns/other"},
		{"malformed", "not-an-ip", "not an IPv4 address"},
	} {
		if a := ensure("gw", tc.req); a.IsValid() {
			t.Errorf("%s: gw got %s, want none", tc.name, a)
		}
		if got := ingress("gw"); got != "" {
			t.Errorf("%s: gw status holds %q, want none", tc.name, got)
		}
		if _, held := c.pool.Lookup("ns/gw"); held {
			t.Errorf("%s: gw still holds an address of the pool", tc.name)
		}
		ensure("gw", tc.req) // the same refusal again records no second event
		if n := events(); n != i+1 {
			t.Errorf("%s: %d events, want %d", tc.name, n, i+1)
		}
		if why := c.refused["ns/gw"]; !strings.Contains(why, tc.why) {
			t.Errorf("%s: refusal %q, want it to say %q", tc.name, why, tc.why)
		}
	}
	if ingress("other") != "10.245.0.1" {
		t.Errorf("other lost its address to a request: %q", ingress("other"))
	}
	if a := ensure("gw", "10.245.0.200"); a != netip.MustParseAddr("10.245.0.200") || ingress("gw") != "10.245.0.200" {
		t.Fatalf("a free requested address: gw got %s, status %q", a, ingress("gw"))
	}
	if _, refused := c.refused["ns/gw"]; refused {
		t.Error("the refusal is remembered after the request succeeded")
	}
	if a := ensure("gw", ""); a != netip.MustParseAddr("10.245.0.200") {
		t.Errorf("without a request gw got %s, want to keep 10.245.0.200", a)
	}
}
