package status

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/internal/graph/conditions"
)

var (
	then = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	now  = metav1.NewTime(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC))
)

func cond(condType string, status metav1.ConditionStatus, reason string, at metav1.Time) metav1.Condition {
	return metav1.Condition{Type: condType, Status: status, Reason: reason, Message: reason, ObservedGeneration: 1, LastTransitionTime: at}
}

func TestConditions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		cur, want []metav1.Condition
		expect    []metav1.Condition
	}{
		{
			name:   "an unchanged status keeps its transition time",
			cur:    []metav1.Condition{cond("Accepted", "True", "Accepted", then)},
			want:   []metav1.Condition{cond("Accepted", "True", "Accepted", metav1.Time{})},
			expect: []metav1.Condition{cond("Accepted", "True", "Accepted", then)},
		},
		{
			name:   "a new reason with the same status keeps the transition time",
			cur:    []metav1.Condition{cond("Accepted", "False", "Pending", then)},
			want:   []metav1.Condition{cond("Accepted", "False", "Invalid", metav1.Time{})},
			expect: []metav1.Condition{cond("Accepted", "False", "Invalid", then)},
		},
		{
			name:   "a changed status gets now",
			cur:    []metav1.Condition{cond("Accepted", "Unknown", "Pending", then)},
			want:   []metav1.Condition{cond("Accepted", "True", "Accepted", metav1.Time{})},
			expect: []metav1.Condition{cond("Accepted", "True", "Accepted", now)},
		},
		{
			name:   "a new type gets now and a type no longer computed is dropped",
			cur:    []metav1.Condition{cond("OverlappingTLSConfig", "True", "OverlappingHostnames", then)},
			want:   []metav1.Condition{cond("Accepted", "True", "Accepted", metav1.Time{})},
			expect: []metav1.Condition{cond("Accepted", "True", "Accepted", now)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tt.expect, Conditions(tt.cur, tt.want, now)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func parent(controller, gateway string, at metav1.Time) gwapiv1.RouteParentStatus {
	return gwapiv1.RouteParentStatus{
		ParentRef:      gwapiv1.ParentReference{Name: gwapiv1.ObjectName(gateway)},
		ControllerName: gwapiv1.GatewayController(controller),
		Conditions:     []metav1.Condition{cond("Accepted", "True", "Accepted", at)},
	}
}

func TestRouteParents(t *testing.T) {
	t.Parallel()
	const ours = "coxswain.dev/gateway-controller"
	cur := []gwapiv1.RouteParentStatus{
		parent(ours, "gone", then),
		parent("example.com/other", "theirs", then),
		parent(ours, "kept", then),
	}
	want := []gwapiv1.RouteParentStatus{parent(ours, "kept", metav1.Time{}), parent(ours, "new", metav1.Time{})}
	expect := []gwapiv1.RouteParentStatus{
		parent("example.com/other", "theirs", then),
		parent(ours, "kept", then),
		parent(ours, "new", now),
	}
	if diff := cmp.Diff(expect, RouteParents(cur, ours, want, now)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := RouteParents(cur[:1], ours, nil, now); len(got) != 0 || got == nil {
		t.Errorf("removing our only entry gave %#v, want an empty non-nil list", got)
	}
}

// Tests that the Gateway status we own keeps the transition times of our listeners' unchanged
// conditions, by listener name, and holds nothing of cur that we did not compute: another
// writer's condition and a listener gone from the spec are left to the server-side apply.
func TestGatewayMergesListenersByName(t *testing.T) {
	t.Parallel()
	cur := gwapiv1.GatewayStatus{Conditions: []metav1.Condition{cond("example.com/Audited", "True", "Seeded", then)}, Listeners: []gwapiv1.ListenerStatus{
		{Name: "old", Conditions: []metav1.Condition{cond("Accepted", "True", "Accepted", then)}},
		{Name: "http", Conditions: []metav1.Condition{cond("Accepted", "True", "Accepted", then)}},
	}}
	want := gwapiv1.GatewayStatus{
		Conditions: []metav1.Condition{cond("Accepted", "True", "Accepted", metav1.Time{})},
		Listeners: []gwapiv1.ListenerStatus{
			{Name: "http", AttachedRoutes: 2, Conditions: []metav1.Condition{cond("Accepted", "True", "Accepted", metav1.Time{})}},
			{Name: "tcp", Conditions: []metav1.Condition{cond("Accepted", "False", "UnsupportedProtocol", metav1.Time{})}},
		},
	}
	addrs := []gwapiv1.GatewayStatusAddress{{Type: ptr.To(gwapiv1.IPAddressType), Value: "10.0.0.1"}}
	expect := gwapiv1.GatewayStatus{
		Addresses:  addrs,
		Conditions: []metav1.Condition{cond("Accepted", "True", "Accepted", now)},
		Listeners: []gwapiv1.ListenerStatus{
			{Name: "http", AttachedRoutes: 2, Conditions: []metav1.Condition{cond("Accepted", "True", "Accepted", then)}},
			{Name: "tcp", Conditions: []metav1.Condition{cond("Accepted", "False", "UnsupportedProtocol", now)}},
		},
	}
	if diff := cmp.Diff(expect, Gateway(cur, want, addrs, now)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestAddresses(t *testing.T) {
	t.Parallel()
	ip := func(v string) gwapiv1.GatewayStatusAddress { return address(gwapiv1.IPAddressType, v) }
	tests := []struct {
		name string
		svc  *corev1.Service
		want []gwapiv1.GatewayStatusAddress
	}{
		{"no Service gives no address", nil, nil},
		{"a ClusterIP Service gives its cluster IPs", &corev1.Service{Spec: corev1.ServiceSpec{ClusterIPs: []string{"10.0.0.1", "fd00::1"}}}, []gwapiv1.GatewayStatusAddress{ip("10.0.0.1"), ip("fd00::1")}},
		{"a headless Service gives no address", &corev1.Service{Spec: corev1.ServiceSpec{ClusterIPs: []string{corev1.ClusterIPNone}}}, nil},
		{
			"a LoadBalancer Service without ingress gives no address, never its cluster IP",
			&corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIPs: []string{"10.0.0.1"}}},
			nil,
		},
		{
			"a NodePort Service gives its cluster IP",
			&corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIPs: []string{"10.0.0.1"}}},
			[]gwapiv1.GatewayStatusAddress{ip("10.0.0.1")},
		},
		{
			"a LoadBalancer Service gives its load balancer's ingress",
			&corev1.Service{
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIPs: []string{"10.0.0.1"}},
				Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{
					{IP: "203.0.113.7"}, {Hostname: "lb.example.com"},
				}}},
			},
			[]gwapiv1.GatewayStatusAddress{ip("203.0.113.7"), address(gwapiv1.HostnameAddressType, "lb.example.com")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tt.want, Addresses(tt.svc)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestProgrammedWaitsForAnAddressAndAReadyProxy(t *testing.T) {
	t.Parallel()
	programmed := metav1.Condition{Type: string(gwapiv1.GatewayConditionProgrammed), Status: metav1.ConditionTrue, Reason: "Programmed", ObservedGeneration: 4}
	accepted := metav1.Condition{Type: string(gwapiv1.GatewayConditionAccepted), Status: metav1.ConditionTrue, Reason: "Accepted"}
	addrs := []gwapiv1.GatewayStatusAddress{address(gwapiv1.IPAddressType, "203.0.113.7")}
	ready := &appsv1.Deployment{Status: appsv1.DeploymentStatus{ReadyReplicas: 1}}
	notReady := &appsv1.Deployment{Status: appsv1.DeploymentStatus{Replicas: 2}}
	tests := []struct {
		name       string
		want       []metav1.Condition
		proxy      Proxy
		status     metav1.ConditionStatus
		wantReason string
	}{
		{"no address is AddressNotAssigned", []metav1.Condition{accepted, programmed}, Proxy{CheckReady: true, Deployment: ready}, metav1.ConditionFalse, string(gwapiv1.GatewayReasonAddressNotAssigned)},
		{"no ready replica is ProxyNotReady", []metav1.Condition{accepted, programmed}, Proxy{Addresses: addrs, CheckReady: true, Deployment: notReady}, metav1.ConditionFalse, "ProxyNotReady"},
		{"no Deployment at all is ProxyNotReady", []metav1.Condition{accepted, programmed}, Proxy{Addresses: addrs, CheckReady: true}, metav1.ConditionFalse, "ProxyNotReady"},
		{"an address and a ready replica keep Programmed", []metav1.Condition{accepted, programmed}, Proxy{Addresses: addrs, CheckReady: true, Deployment: ready}, metav1.ConditionTrue, "Programmed"},
		{"two requested addresses are AddressNotUsable", []metav1.Condition{accepted, programmed}, Proxy{Addresses: addrs, Requested: []string{"203.0.113.7", "203.0.113.8"}, CheckReady: true, Deployment: ready}, metav1.ConditionFalse, string(gwapiv1.GatewayReasonAddressNotUsable)},
		{"a requested address not assigned is AddressNotAssigned", []metav1.Condition{accepted, programmed}, Proxy{Requested: []string{"192.0.2.1"}, CheckReady: true, Deployment: ready}, metav1.ConditionFalse, string(gwapiv1.GatewayReasonAddressNotAssigned)},
		{"another address than the requested one is AddressNotUsable", []metav1.Condition{accepted, programmed}, Proxy{Addresses: addrs, Requested: []string{"192.0.2.1"}, CheckReady: true, Deployment: ready}, metav1.ConditionFalse, string(gwapiv1.GatewayReasonAddressNotUsable)},
		{"the requested address assigned keeps Programmed", []metav1.Condition{accepted, programmed}, Proxy{Addresses: addrs, Requested: []string{"203.0.113.7"}, CheckReady: true, Deployment: ready}, metav1.ConditionTrue, "Programmed"},
		{"the requested address assigned still waits for a ready replica", []metav1.Condition{accepted, programmed}, Proxy{Addresses: addrs, Requested: []string{"203.0.113.7"}, CheckReady: true, Deployment: notReady}, metav1.ConditionFalse, "ProxyNotReady"},
		{"readiness is not checked when the proxy is unknown", []metav1.Condition{accepted, programmed}, Proxy{Addresses: addrs}, metav1.ConditionTrue, "Programmed"},
		{"proxies that applied the generation keep Programmed", []metav1.Condition{accepted, programmed}, Proxy{Addresses: addrs, CheckReady: true, Deployment: ready, Applied: Applied{State: AppliedYes}}, metav1.ConditionTrue, "Programmed"},
		{"a proxy yet to apply the generation is Unknown and Pending", []metav1.Condition{accepted, programmed}, Proxy{Addresses: addrs, CheckReady: true, Deployment: ready, Applied: Applied{State: AppliedPending, Message: "waiting"}}, metav1.ConditionUnknown, string(gwapiv1.GatewayReasonPending)},
		{"a proxy that refused the generation is Invalid", []metav1.Condition{accepted, programmed}, Proxy{Addresses: addrs, CheckReady: true, Deployment: ready, Applied: Applied{State: AppliedRefused, Message: "bad"}}, metav1.ConditionFalse, string(gwapiv1.GatewayReasonInvalid)},
		{"no ready replica comes before the proxies' verdict", []metav1.Condition{accepted, programmed}, Proxy{Addresses: addrs, CheckReady: true, Deployment: notReady, Applied: Applied{State: AppliedRefused, Message: "bad"}}, metav1.ConditionFalse, "ProxyNotReady"},
		{"no verdict keeps Programmed and says why", []metav1.Condition{accepted, programmed}, Proxy{Addresses: addrs, CheckReady: true, Deployment: ready, Applied: Applied{Message: "not judged"}}, metav1.ConditionTrue, "Programmed"},
		{
			"a Programmed condition already False keeps its reason",
			[]metav1.Condition{accepted, {Type: programmed.Type, Status: metav1.ConditionFalse, Reason: "Invalid"}},
			Proxy{CheckReady: true},
			metav1.ConditionFalse, "Invalid",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Programmed(tt.want, tt.proxy)
			c := meta.FindStatusCondition(got, programmed.Type)
			if c == nil || c.Status != tt.status || c.Reason != tt.wantReason {
				t.Fatalf("Programmed = %+v, want %s/%s", c, tt.status, tt.wantReason)
			}
			if tt.want[1].Status == metav1.ConditionTrue && c.ObservedGeneration != programmed.ObservedGeneration {
				t.Errorf("observedGeneration %d, want %d", c.ObservedGeneration, programmed.ObservedGeneration)
			}
			if diff := cmp.Diff(tt.want[0], got[0]); diff != "" {
				t.Errorf("Accepted changed (-want +got):\n%s", diff)
			}
			if m := tt.proxy.Applied.Message; m != "" && c.Reason != "ProxyNotReady" && !strings.HasSuffix(c.Message, m) {
				t.Errorf("message %q does not end with the verdict's %q", c.Message, m)
			}
		})
	}
}

// Tests that policy ancestors keep other controllers' entries, replace ours (keeping the
// transition time of an unchanged condition), drop our stale ones, and never exceed 16.
func TestPolicyAncestors(t *testing.T) {
	t.Parallel()
	ours, theirs := gwapiv1.GatewayController("coxswain.dev/gateway-controller"), gwapiv1.GatewayController("other.dev/x")
	ancestor := func(name string, controller gwapiv1.GatewayController, at metav1.Time) gwapiv1.PolicyAncestorStatus {
		return gwapiv1.PolicyAncestorStatus{
			AncestorRef:    gwapiv1.ParentReference{Name: gwapiv1.ObjectName(name)},
			ControllerName: controller,
			Conditions:     []metav1.Condition{cond("Accepted", metav1.ConditionTrue, "Accepted", at)},
		}
	}
	cur := []gwapiv1.PolicyAncestorStatus{ancestor("foreign", theirs, then), ancestor("kept", ours, then), ancestor("stale", ours, then)}
	want := []gwapiv1.PolicyAncestorStatus{ancestor("kept", ours, metav1.Time{}), ancestor("new", ours, metav1.Time{})}
	got := PolicyAncestors(cur, ours, want, now)
	wantOut := []gwapiv1.PolicyAncestorStatus{ancestor("foreign", theirs, then), ancestor("kept", ours, then), ancestor("new", ours, now)}
	if diff := cmp.Diff(wantOut, got); diff != "" {
		t.Errorf("PolicyAncestors (-want +got):\n%s", diff)
	}

	var many []gwapiv1.PolicyAncestorStatus
	for i := range 20 {
		many = append(many, ancestor(string(rune('a'+i)), ours, metav1.Time{}))
	}
	if got := PolicyAncestors(cur[:1], ours, many, now); len(got) != 16 || got[0].ControllerName != theirs {
		t.Errorf("PolicyAncestors kept %d entries (first of %s), want 16 with the foreign one first", len(got), got[0].ControllerName)
	}
}

func TestProxyWarningOnlyAtTheTransition(t *testing.T) {
	t.Parallel()
	programmed := func(status metav1.ConditionStatus, reason string) []metav1.Condition {
		return []metav1.Condition{{Type: string(gwapiv1.GatewayConditionProgrammed), Status: status, Reason: reason}}
	}
	noAddress := programmed(metav1.ConditionFalse, string(gwapiv1.GatewayReasonAddressNotAssigned))
	notReady := programmed(metav1.ConditionFalse, conditions.ReasonProxyNotReady)
	tests := []struct {
		name      string
		cur, want []metav1.Condition
		refused   bool
		warn      bool
	}{
		{"a new Gateway without an address", nil, noAddress, false, true},
		{"Programmed turning to no address", programmed(metav1.ConditionTrue, "Programmed"), noAddress, false, true},
		{"an address but no ready replica", noAddress, notReady, false, true},
		{"still no ready replica", notReady, notReady, false, false},
		{"programmed", notReady, programmed(metav1.ConditionTrue, "Programmed"), false, false},
		{"not programmed for another reason", nil, programmed(metav1.ConditionFalse, "Invalid"), false, false},
		{"a proxy refusing the configuration", programmed(metav1.ConditionTrue, "Programmed"), programmed(metav1.ConditionFalse, "Invalid"), true, true},
		{"a proxy still refusing it", programmed(metav1.ConditionFalse, "Invalid"), programmed(metav1.ConditionFalse, "Invalid"), true, false},
	}
	for _, tt := range tests {
		if got := proxyWarning(tt.cur, tt.want, tt.refused); (got != nil) != tt.warn {
			t.Errorf("%s: warning %v, want %v", tt.name, got, tt.warn)
		}
	}
}
