package status

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/discovery/printable"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/graph/conditions"
	"coxswain.dev/coxswain/internal/state"
)

// Tests that a ListenerSet's status replaces the API server's Pending defaults, keeps the
// transition time of a listener condition whose status holds, and drops listeners no longer
// in the spec.
func TestListenerSetMergesListenersByName(t *testing.T) {
	t.Parallel()
	cur := gwapiv1.ListenerSetStatus{
		Conditions: []metav1.Condition{cond("Accepted", "Unknown", "Pending", then), cond("Programmed", "Unknown", "Pending", then)},
		Listeners: []gwapiv1.ListenerEntryStatus{
			{Name: "kept", Conditions: []metav1.Condition{cond("Accepted", "True", "Accepted", then)}},
			{Name: "gone", Conditions: []metav1.Condition{cond("Accepted", "True", "Accepted", then)}},
		},
	}
	want := gwapiv1.ListenerSetStatus{
		Conditions: []metav1.Condition{cond("Accepted", "True", "Accepted", metav1.Time{}), cond("Programmed", "True", "Programmed", metav1.Time{})},
		Listeners: []gwapiv1.ListenerEntryStatus{
			{Name: "kept", AttachedRoutes: 2, Conditions: []metav1.Condition{cond("Accepted", "True", "Accepted", metav1.Time{})}},
		},
	}
	got := ListenerSet(cur, want, now)
	expect := gwapiv1.ListenerSetStatus{
		Conditions: []metav1.Condition{cond("Accepted", "True", "Accepted", now), cond("Programmed", "True", "Programmed", now)},
		Listeners: []gwapiv1.ListenerEntryStatus{
			{Name: "kept", AttachedRoutes: 2, Conditions: []metav1.Condition{cond("Accepted", "True", "Accepted", then)}},
		},
	}
	if diff := cmp.Diff(expect, got); diff != "" {
		t.Errorf("ListenerSet (-want +got):\n%s", diff)
	}
}

// Tests that the Gateway's attachedListenerSets follows the computed status, and is removed
// when the Gateway no longer allows ListenerSets.
func TestGatewayAttachedListenerSetsFollowsWant(t *testing.T) {
	t.Parallel()
	cur := gwapiv1.GatewayStatus{AttachedListenerSets: ptr.To(int32(2))}
	if got := Gateway(cur, gwapiv1.GatewayStatus{AttachedListenerSets: ptr.To(int32(1))}, nil, now); ptr.Deref(got.AttachedListenerSets, -1) != 1 {
		t.Errorf("attachedListenerSets = %v, want 1", got.AttachedListenerSets)
	}
	if got := Gateway(cur, gwapiv1.GatewayStatus{}, nil, now); got.AttachedListenerSets != nil {
		t.Errorf("attachedListenerSets = %d, want unset", *got.AttachedListenerSets)
	}
}

// Tests that a ListenerSet is not Programmed while its parent's proxy has no address, and is
// once the parent's proxy Service has one and a replica is ready.
func TestListenerSetWaitsForItsParentsProxy(t *testing.T) {
	t.Parallel()
	cs, parent, svc, gateways := dedicatedParent()
	ls := graph.ListenerSetStatus{Namespace: "team", Name: "extra", Gateway: parent, Status: gwapiv1.ListenerSetStatus{
		Conditions: []metav1.Condition{cond("Accepted", "True", "Accepted", metav1.Time{}), cond("Programmed", "True", "Programmed", metav1.Time{})},
	}}
	w := &Writer{}
	proxy := gatewayProxy{service: svc}

	got := w.withParent(cs, ls, gateways, proxy)
	if err := wantReason(got.Conditions, "Programmed", metav1.ConditionFalse, conditions.ReasonParentNotProgrammed); err != "" {
		t.Errorf("without an address: %s", err)
	}
	if err := wantReason(got.Conditions, "Accepted", metav1.ConditionTrue, "Accepted"); err != "" {
		t.Errorf("without an address: %s", err)
	}

	readyProxy(cs, parent, svc)
	got = w.withParent(cs, ls, gateways, proxy)
	if err := wantReason(got.Conditions, "Programmed", metav1.ConditionTrue, "Programmed"); err != "" {
		t.Errorf("with an address and a ready replica: %s", err)
	}
}

// dedicatedParent returns a cluster state holding the Gateway infra/web of a dedicated proxy, the
// Gateway's key and its proxy's, and the graph's status of the Gateway, Programmed.
func dedicatedParent() (cs *state.ClusterState, parent, proxy types.NamespacedName, gateways []graph.GatewayStatus) {
	parent = types.NamespacedName{Namespace: "infra", Name: "web"}
	proxy = types.NamespacedName{Namespace: "infra", Name: "web-coxswain"}
	cs = state.New()
	cs.Gateways[parent] = &gwapiv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: parent.Namespace, Name: parent.Name, UID: "web-uid"}}
	gateways = []graph.GatewayStatus{{Namespace: parent.Namespace, Name: parent.Name, Status: gwapiv1.GatewayStatus{
		Conditions: []metav1.Condition{cond("Programmed", "True", "Programmed", metav1.Time{})},
	}}}
	return cs, parent, proxy, gateways
}

// readyProxy gives the proxy Service of parent an address and its Deployment a ready replica.
func readyProxy(cs *state.ClusterState, parent, proxy types.NamespacedName) {
	owned := metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{Kind: "Gateway", Name: parent.Name, UID: cs.Gateways[parent].UID, Controller: ptr.To(true)}}}
	cs.Services[proxy] = &corev1.Service{ObjectMeta: owned, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}, Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{
		Ingress: []corev1.LoadBalancerIngress{{IP: "10.245.0.7"}},
	}}}
	cs.Deployments[proxy] = &appsv1.Deployment{ObjectMeta: owned, Status: appsv1.DeploymentStatus{ReadyReplicas: 1}}
}

func wantReason(conds []metav1.Condition, condType string, status metav1.ConditionStatus, reason string) string {
	c := meta.FindStatusCondition(conds, condType)
	if c == nil || c.Status != status || c.Reason != reason {
		return fmt.Sprintf("%s = %+v, want %s/%s", condType, c, status, reason)
	}
	return ""
}

// Tests that a proxy's refusal reaches its Gateway's Programmed condition printable and bounded,
// and that a ListenerSet of the Gateway in another namespace names the Gateway only: the
// proxy's error may name the Gateway namespace's Secrets.
func TestAProxysRefusalStaysInTheGatewaysNamespace(t *testing.T) {
	t.Parallel()
	cs, parent, svc, gateways := dedicatedParent()
	readyProxy(cs, parent, svc)
	const secret = "Secret infra/web-tls-key"
	detail := "\x1b[31m" + secret + " does not match its certificate\u202e\x1b[0m " + strings.Repeat("x", 10<<10)
	w := &Writer{Applied: func(cache.Scope, types.NamespacedName, types.UID, int64) Applied {
		return Applied{State: AppliedRefused, Message: "Proxy web-0 refused the snapshot: " + detail}
	}}
	proxy := gatewayProxy{service: svc}

	programmed := meta.FindStatusCondition(Programmed(gateways[0].Status.Conditions, w.proxyOf(cs, cs.Gateways[parent], proxy)), "Programmed")
	if programmed == nil || programmed.Reason != string(gwapiv1.GatewayReasonInvalid) {
		t.Fatalf("the Gateway's Programmed = %+v, want False/Invalid", programmed)
	}
	if !printable.Clean(programmed.Message) || len(programmed.Message) > MaxProxyMessage || !strings.Contains(programmed.Message, secret) {
		t.Errorf("the Gateway's Programmed message (%d bytes) = %q, want the proxy's error printable within %d bytes",
			len(programmed.Message), programmed.Message, MaxProxyMessage)
	}

	for _, ns := range []string{"team", parent.Namespace} {
		ls := graph.ListenerSetStatus{Namespace: ns, Name: "extra", Gateway: parent, Status: gwapiv1.ListenerSetStatus{
			Conditions: []metav1.Condition{cond("Accepted", "True", "Accepted", metav1.Time{}), cond("Programmed", "True", "Programmed", metav1.Time{})},
		}}
		got := meta.FindStatusCondition(w.withParent(cs, ls, gateways, proxy).Conditions, "Programmed")
		if got == nil || got.Reason != conditions.ReasonParentNotProgrammed || !strings.Contains(got.Message, parent.String()) {
			t.Fatalf("ListenerSet in %s: Programmed = %+v, want False/%s naming the Gateway", ns, got, conditions.ReasonParentNotProgrammed)
		}
		if !printable.Clean(got.Message) || len(got.Message) > MaxProxyMessage {
			t.Errorf("ListenerSet in %s: message (%d bytes) %q not printable or bounded", ns, len(got.Message), got.Message)
		}
		if ns != parent.Namespace && (strings.Contains(got.Message, secret) || strings.Contains(got.Message, "web-0")) {
			t.Errorf("ListenerSet in another namespace copies the proxy's error: %q", got.Message)
		}
	}
}
