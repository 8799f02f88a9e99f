package service

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

var serviceCIDR = netip.MustParsePrefix("10.96.0.0/16")

type ep struct {
	addr               string
	ready, terminating *bool
}

func slice(name string, typ discoveryv1.AddressType, ports map[string]int32, eps ...ep) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, AddressType: typ}
	for n, p := range ports {
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptr.To(n), Port: ptr.To(p), Protocol: ptr.To(corev1.ProtocolTCP)})
	}
	for _, e := range eps {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{e.addr},
			Conditions: discoveryv1.EndpointConditions{Ready: e.ready, Terminating: e.terminating},
		})
	}
	return s
}

func aps(ss ...string) []netip.AddrPort {
	var out []netip.AddrPort
	for _, s := range ss {
		out = append(out, netip.MustParseAddrPort(s))
	}
	return out
}

// Tests which endpoints take connections: ready or of unknown readiness, not terminating, IPv4,
// with the port of the Service port's name, once each, sorted.
func TestReadyBackends(t *testing.T) {
	t.Parallel()
	yes, no := ptr.To(true), ptr.To(false)
	for _, tc := range []struct {
		name   string
		slices []*discoveryv1.EndpointSlice
		port   string
		want   []netip.AddrPort
	}{
		{
			name: "ready and unknown endpoints are used, not-ready and terminating ones are not",
			slices: []*discoveryv1.EndpointSlice{slice("a", discoveryv1.AddressTypeIPv4, map[string]int32{"http": 8080},
				ep{addr: "10.244.0.3", ready: yes}, ep{addr: "10.244.0.2"}, ep{addr: "10.244.0.4", ready: no},
				ep{addr: "10.244.0.5", ready: yes, terminating: yes})},
			port: "http",
			want: aps("10.244.0.2:8080", "10.244.0.3:8080"),
		},
		{
			name: "each slice gives the port number its target port resolved to",
			slices: []*discoveryv1.EndpointSlice{
				slice("a", discoveryv1.AddressTypeIPv4, map[string]int32{"http": 8080, "admin": 9000}, ep{addr: "10.244.0.2"}),
				slice("b", discoveryv1.AddressTypeIPv4, map[string]int32{"http": 8081}, ep{addr: "10.244.0.3"}),
			},
			port: "http",
			want: aps("10.244.0.2:8080", "10.244.0.3:8081"),
		},
		{
			name: "a slice without the port is skipped",
			slices: []*discoveryv1.EndpointSlice{
				slice("a", discoveryv1.AddressTypeIPv4, map[string]int32{"admin": 9000}, ep{addr: "10.244.0.2"}),
			},
			port: "http",
		},
		{
			name: "an unnamed port matches the empty name",
			slices: []*discoveryv1.EndpointSlice{
				slice("a", discoveryv1.AddressTypeIPv4, map[string]int32{"": 80}, ep{addr: "10.244.0.2"}),
			},
			port: "",
			want: aps("10.244.0.2:80"),
		},
		{
			name: "IPv6 slices are skipped and duplicates across slices are dropped",
			slices: []*discoveryv1.EndpointSlice{
				slice("a", discoveryv1.AddressTypeIPv6, map[string]int32{"http": 80}, ep{addr: "fd00::2"}),
				slice("b", discoveryv1.AddressTypeIPv4, map[string]int32{"http": 80}, ep{addr: "10.244.0.2"}),
				slice("c", discoveryv1.AddressTypeIPv4, map[string]int32{"http": 80}, ep{addr: "10.244.0.2"}),
			},
			port: "http",
			want: aps("10.244.0.2:80"),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := ReadyBackends(tc.slices, tc.port, corev1.ProtocolTCP)
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("backends (-want +got):\n%s", diff)
			}
		})
	}
}

// Tests the frontends of a Service: each TCP and UDP port on the ClusterIP and on the
// load-balancer address, SCTP apart, nothing for a headless Service or one outside the range.
func TestFrontends(t *testing.T) {
	t.Parallel()
	s := slice("a", discoveryv1.AddressTypeIPv4, map[string]int32{"http": 8080}, ep{addr: "10.244.0.2"})
	s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptr.To("dns"), Port: ptr.To[int32](5353), Protocol: ptr.To(corev1.ProtocolUDP)})
	eps := []*discoveryv1.EndpointSlice{s}
	svc := func(clusterIP string) *corev1.Service {
		return &corev1.Service{Spec: corev1.ServiceSpec{
			ClusterIP: clusterIP,
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")},
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
				{Name: "sctp", Port: 9, Protocol: corev1.ProtocolSCTP},
			},
		}}
	}
	http, dns := aps("10.244.0.2:8080"), aps("10.244.0.2:5353")
	fs, unserved := Frontends(svc("10.96.0.10"), serviceCIDR, netip.MustParseAddr("10.245.0.1"), eps)
	want := []Frontend{
		{Addr: netip.MustParseAddrPort("10.96.0.10:80"), Protocol: corev1.ProtocolTCP, Backends: http},
		{Addr: netip.MustParseAddrPort("10.245.0.1:80"), Protocol: corev1.ProtocolTCP, Backends: http},
		{Addr: netip.MustParseAddrPort("10.96.0.10:53"), Protocol: corev1.ProtocolUDP, Backends: dns},
		{Addr: netip.MustParseAddrPort("10.245.0.1:53"), Protocol: corev1.ProtocolUDP, Backends: dns},
	}
	if diff := cmp.Diff(want, fs, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
		t.Errorf("frontends (-want +got):\n%s", diff)
	}
	if len(unserved) != 1 || unserved[0].Name != "sctp" {
		t.Errorf("unserved ports %v, want the SCTP one", unserved)
	}
	for _, ip := range []string{"None", "", "10.97.0.1"} {
		if fs, _ := Frontends(svc(ip), serviceCIDR, netip.Addr{}, eps); len(fs) != 0 {
			t.Errorf("ClusterIP %q has frontends %v, want none", ip, fs)
		}
	}
}
