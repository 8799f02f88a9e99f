package status

import (
	"fmt"
	"net/netip"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/discovery/printable"
	"coxswain.dev/coxswain/internal/graph/conditions"
)

// Addresses returns the addresses a Gateway is reached at through its proxy Service: for a
// LoadBalancer Service its load balancer ingress only (its cluster IP is not what clients can
// reach, so none is reported until the ingress exists), for any other type its cluster IPs;
// none without a Service.
func Addresses(svc *corev1.Service) []gwapiv1.GatewayStatusAddress {
	if svc == nil {
		return nil
	}
	var out []gwapiv1.GatewayStatusAddress
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			switch {
			case ing.IP != "":
				out = append(out, address(gwapiv1.IPAddressType, ing.IP))
			case ing.Hostname != "":
				out = append(out, address(gwapiv1.HostnameAddressType, ing.Hostname))
			}
		}
		return out
	}
	for _, ip := range svc.Spec.ClusterIPs {
		if ip != "" && ip != corev1.ClusterIPNone {
			out = append(out, address(gwapiv1.IPAddressType, ip))
		}
	}
	return out
}

func address(t gwapiv1.AddressType, value string) gwapiv1.GatewayStatusAddress {
	return gwapiv1.GatewayStatusAddress{Type: ptr.To(t), Value: value}
}

// Proxy is what a Gateway's Programmed condition waits for besides its configuration.
type Proxy struct {
	// Addresses are the Gateway's addresses, from its proxy Service.
	Addresses []gwapiv1.GatewayStatusAddress
	// Requested are the IP addresses the Gateway's spec.addresses asks for
	// (graph.RequestedAddresses), which its proxy Service asks of the load balancer.
	Requested []string
	// CheckReady says whether Deployment is known to be the Gateway's proxy; when false (the
	// writer was not told the shared pool's Deployment) readiness is not checked.
	CheckReady bool
	Deployment *appsv1.Deployment
	// Applied is the verdict on whether the proxies applied the Gateway's current generation;
	// the zero value (AppliedUnknown) leaves Programmed to readiness.
	Applied Applied
}

// Programmed returns want with its Programmed condition made False while the proxy cannot
// serve yet: AddressNotAssigned until an address exists (or, for a Gateway that requests one,
// until the requested address exists), AddressNotUsable when it requests more than the one address
// a Service holds or the load balancer gave another address than the requested one,
// ProxyNotReady until at least one proxy replica is ready. Then the verdict of the proxies'
// acknowledgements: Unknown with reason Pending until every proxy judged applied a snapshot that
// holds the Gateway's current generation, False with reason Invalid and the proxy's error when
// one refused it; an AppliedUnknown verdict with a message keeps True and says why it could not
// judge. A Programmed condition already False is kept: its reason comes first.
func Programmed(want []metav1.Condition, p Proxy) []metav1.Condition {
	out := make([]metav1.Condition, len(want))
	copy(out, want)
	p.Applied.Message = printable.Text(p.Applied.Message, MaxProxyMessage)
	for i, c := range out {
		if c.Type != string(gwapiv1.GatewayConditionProgrammed) || c.Status != metav1.ConditionTrue {
			continue
		}
		var next *metav1.Condition
		switch {
		case len(p.Requested) > 1:
			next = ptr.To(conditions.NewGatewayNotProgrammedAddressNotUsable(fmt.Sprintf(
				"spec.addresses requests %d addresses (%s); a Gateway gets one load-balancer address: keep one",
				len(p.Requested), strings.Join(p.Requested, ", "))))
		case len(p.Requested) == 1 && len(p.Addresses) == 0:
			next = ptr.To(conditions.NewGatewayNotProgrammedAddressNotAssigned(fmt.Sprintf(
				"The load balancer has not assigned the requested address %s to the proxy Service: "+
					"an address outside its pool or held by another Service is never assigned (see the Service's events)",
				p.Requested[0])))
		case len(p.Requested) == 1 && !hasAddress(p.Addresses, p.Requested[0]):
			next = ptr.To(conditions.NewGatewayNotProgrammedAddressNotUsable(fmt.Sprintf(
				"The proxy Service got %s, not the requested address %s: the load balancer does not honour "+
					"spec.loadBalancerIP, or the Service is not of type LoadBalancer",
				p.Addresses[0].Value, p.Requested[0])))
		case len(p.Addresses) == 0:
			next = ptr.To(conditions.NewGatewayNotProgrammedAddressNotAssigned("The proxy Service has no address yet"))
		case p.CheckReady && (p.Deployment == nil || p.Deployment.Status.ReadyReplicas == 0):
			next = ptr.To(conditions.NewGatewayNotProgrammedProxyNotReady("No proxy replica is ready yet"))
		case p.Applied.State == AppliedUnknown && p.Applied.Message != "":
			next = ptr.To(c)
			next.Message = c.Message + "; " + p.Applied.Message
		default:
			next = judged(p.Applied)
		}
		if next != nil {
			next.ObservedGeneration = c.ObservedGeneration
			out[i] = *next
		}
	}
	return out
}

// hasAddress says whether addrs holds the IP address want, compared as addresses.
func hasAddress(addrs []gwapiv1.GatewayStatusAddress, want string) bool {
	w, err := netip.ParseAddr(want)
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if got, err := netip.ParseAddr(a.Value); err == nil && got == w {
			return true
		}
	}
	return false
}
