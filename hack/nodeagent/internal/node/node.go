package node

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// LeaseNamespace holds the node Leases.
const LeaseNamespace = "kube-node-lease"

// Config describes the Node.
type Config struct {
	Name string
	// Address is the node's InternalIP (the bridge address pods reach it on).
	Address string
	PodCIDR string
	// Capacity is reported as both capacity and allocatable.
	Capacity corev1.ResourceList
	// Version is reported as the kubelet version.
	Version string
	// KubeletPort is the port of the kubelet API (status.daemonEndpoints); 0 publishes none.
	KubeletPort int32
	// LeaseDuration is the Lease's duration; it is renewed every quarter of it, and the Ready
	// condition refreshed at the same pace.
	LeaseDuration time.Duration
}

// Heartbeat registers and then keeps the Node fresh.
type Heartbeat struct {
	client kubernetes.Interface
	cfg    Config
	log    logr.Logger
	now    func() time.Time
}

// New returns a Heartbeat for cfg.
func New(client kubernetes.Interface, cfg Config, log logr.Logger) *Heartbeat {
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = 40 * time.Second
	}
	return &Heartbeat{client: client, cfg: cfg, log: log.WithName("node"), now: time.Now}
}

// Register creates the Node, or takes over an existing one of that name, and reports it Ready.
func (h *Heartbeat) Register(ctx context.Context) error {
	nodes := h.client.CoreV1().Nodes()
	want := h.desired()
	node, err := nodes.Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		node, err = nodes.Get(ctx, h.cfg.Name, metav1.GetOptions{})
		if err == nil {
			node.Labels, node.Spec.PodCIDR, node.Spec.PodCIDRs = want.Labels, want.Spec.PodCIDR, want.Spec.PodCIDRs
			node.Spec.Unschedulable = false
			node, err = nodes.Update(ctx, node, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("register node %s: %w", h.cfg.Name, err)
	}
	if err := h.updateStatus(ctx, node); err != nil {
		return err
	}
	h.log.Info("Registered node", "node", h.cfg.Name, "address", h.cfg.Address)
	return nil
}

// Run renews the Lease and the Ready condition until ctx ends. Failures are logged and retried
// at the next beat: a missed beat is what the lease duration allows for.
func (h *Heartbeat) Run(ctx context.Context) {
	tick := time.NewTicker(h.cfg.LeaseDuration / 4)
	defer tick.Stop()
	for {
		if err := h.beat(ctx); err != nil && ctx.Err() == nil {
			h.log.Error(err, "Heartbeat failed")
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (h *Heartbeat) beat(ctx context.Context) error {
	node, err := h.client.CoreV1().Nodes().Get(ctx, h.cfg.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get node: %w", err)
	}
	if err := h.renewLease(ctx, node); err != nil {
		return err
	}
	return h.updateStatus(ctx, node)
}

func (h *Heartbeat) desired() *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: h.cfg.Name,
			Labels: map[string]string{
				corev1.LabelHostname:   h.cfg.Name,
				corev1.LabelOSStable:   "linux",
				corev1.LabelArchStable: "amd64",
				"type":                 "coxswain-node-agent",
			},
		},
		Spec: corev1.NodeSpec{PodCIDR: h.cfg.PodCIDR, PodCIDRs: []string{h.cfg.PodCIDR}},
	}
}

func (h *Heartbeat) updateStatus(ctx context.Context, node *corev1.Node) error {
	now := metav1.NewTime(h.now())
	node = node.DeepCopy()
	node.Status.Capacity = h.cfg.Capacity
	node.Status.Allocatable = h.cfg.Capacity
	node.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: h.cfg.Address},
		{Type: corev1.NodeHostName, Address: h.cfg.Name},
	}
	node.Status.NodeInfo.KubeletVersion = h.cfg.Version
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = h.cfg.KubeletPort
	node.Status.NodeInfo.OperatingSystem = "linux"
	node.Status.NodeInfo.Architecture = "amd64"
	node.Status.NodeInfo.ContainerRuntimeVersion = "coxswain-node-agent://" + h.cfg.Version
	node.Status.Conditions = conditions(node.Status.Conditions, now)
	if _, err := h.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update node status: %w", err)
	}
	return nil
}

// conditions returns the Ready and pressure conditions with a fresh heartbeat, keeping each
// transition time while its status stays the same.
func conditions(old []corev1.NodeCondition, now metav1.Time) []corev1.NodeCondition {
	want := []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "node agent is posting ready status"},
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory"},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure"},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID"},
		{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse, Reason: "RouteCreated"},
	}
	for i := range want {
		want[i].LastHeartbeatTime, want[i].LastTransitionTime = now, now
		for _, o := range old {
			if o.Type == want[i].Type && o.Status == want[i].Status {
				want[i].LastTransitionTime = o.LastTransitionTime
			}
		}
	}
	return want
}

func (h *Heartbeat) renewLease(ctx context.Context, node *corev1.Node) error {
	leases := h.client.CoordinationV1().Leases(LeaseNamespace)
	now := metav1.NewMicroTime(h.now())
	lease, err := leases.Get(ctx, h.cfg.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
			Name:      h.cfg.Name,
			Namespace: LeaseNamespace,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
			}},
		}}
		lease.Spec = h.leaseSpec(now)
		if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create lease: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("get lease: %w", err)
	}
	lease.Spec = h.leaseSpec(now)
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("renew lease: %w", err)
	}
	return nil
}

func (h *Heartbeat) leaseSpec(now metav1.MicroTime) coordinationv1.LeaseSpec {
	return coordinationv1.LeaseSpec{
		HolderIdentity:       ptr.To(h.cfg.Name),
		LeaseDurationSeconds: ptr.To(int32(h.cfg.LeaseDuration / time.Second)),
		RenewTime:            &now,
	}
}
