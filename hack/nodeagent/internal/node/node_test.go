package node

import (
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// Tests that registration reports the Node Ready with its addresses and capacity, that a beat
// creates then renews the Lease, and that a beat keeps the Ready transition time while
// moving the heartbeat time.
func TestRegisterAndBeat(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	client := fake.NewClientset()
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := New(client, Config{
		Name: "n1", Address: "10.244.0.1", PodCIDR: "10.244.0.0/24",
		Capacity: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")}, Version: "v1",
	}, logr.Discard())
	h.now = func() time.Time { return clock }
	if err := h.Register(ctx); err != nil {
		t.Fatal(err)
	}
	node, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := condition(node, corev1.NodeReady)
	if ready == nil || ready.Status != corev1.ConditionTrue {
		t.Fatalf("registered node not Ready: %v", node.Status.Conditions)
	}
	if len(node.Status.Addresses) == 0 || node.Status.Addresses[0].Address != "10.244.0.1" || node.Spec.PodCIDR != "10.244.0.0/24" {
		t.Errorf("node addresses %v, pod CIDR %s", node.Status.Addresses, node.Spec.PodCIDR)
	}
	registered := ready.LastTransitionTime

	for i := 1; i <= 2; i++ {
		clock = clock.Add(10 * time.Second)
		if err := h.beat(ctx); err != nil {
			t.Fatal(err)
		}
		lease, err := client.CoordinationV1().Leases(LeaseNamespace).Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !lease.Spec.RenewTime.Time.Equal(clock) || *lease.Spec.HolderIdentity != "n1" || *lease.Spec.LeaseDurationSeconds != 40 {
			t.Errorf("beat %d: lease %+v, want renewed at %s by n1 for 40s", i, lease.Spec, clock)
		}
	}
	node, err = client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready = condition(node, corev1.NodeReady)
	if !ready.LastTransitionTime.Equal(&registered) || !ready.LastHeartbeatTime.Time.Equal(clock) {
		t.Errorf("Ready after beats: transition %s (want %s kept), heartbeat %s (want %s)",
			ready.LastTransitionTime, registered, ready.LastHeartbeatTime, clock)
	}
}

func condition(node *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == t {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}
