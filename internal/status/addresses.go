package status

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Addresses returns the addresses a Gateway is reached at through its proxy Service: the load
// balancer ingress when there is one, the cluster IPs otherwise, none without a Service.
func Addresses(svc *corev1.Service) []gwapiv1.GatewayStatusAddress {
	if svc == nil {
		return nil
	}
	var out []gwapiv1.GatewayStatusAddress
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		switch {
		case ing.IP != "":
			out = append(out, address(gwapiv1.IPAddressType, ing.IP))
		case ing.Hostname != "":
			out = append(out, address(gwapiv1.HostnameAddressType, ing.Hostname))
		}
	}
	if len(out) > 0 {
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
