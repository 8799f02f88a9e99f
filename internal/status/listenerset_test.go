package status

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

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
	parent := types.NamespacedName{Namespace: "infra", Name: "web"}
	svc := types.NamespacedName{Namespace: "infra", Name: "web-coxswain"}
	cs := state.New()
	cs.Gateways[parent] = &gwapiv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: parent.Namespace, Name: parent.Name, UID: "web-uid"}}
	owned := metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{Kind: "Gateway", Name: parent.Name, UID: "web-uid", Controller: ptr.To(true)}}}
	gateways := []graph.GatewayStatus{{Namespace: parent.Namespace, Name: parent.Name, Status: gwapiv1.GatewayStatus{
		Conditions: []metav1.Condition{cond("Programmed", "True", "Programmed", metav1.Time{})},
	}}}
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

	cs.Services[svc] = &corev1.Service{ObjectMeta: owned, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}, Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{
		Ingress: []corev1.LoadBalancerIngress{{IP: "10.245.0.7"}},
	}}}
	cs.Deployments[svc] = &appsv1.Deployment{ObjectMeta: owned, Status: appsv1.DeploymentStatus{ReadyReplicas: 1}}
	got = w.withParent(cs, ls, gateways, proxy)
	if err := wantReason(got.Conditions, "Programmed", metav1.ConditionTrue, "Programmed"); err != "" {
		t.Errorf("with an address and a ready replica: %s", err)
	}
}

func wantReason(conds []metav1.Condition, condType string, status metav1.ConditionStatus, reason string) string {
	c := meta.FindStatusCondition(conds, condType)
	if c == nil || c.Status != status || c.Reason != reason {
		return fmt.Sprintf("%s = %+v, want %s/%s", condType, c, status, reason)
	}
	return ""
}
