package status

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/discovery/printable"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/graph/conditions"
	"coxswain.dev/coxswain/internal/state"
)

// withParent returns the status of a ListenerSet with Programmed turned False
// (ParentNotProgrammed) while its parent Gateway is not Programmed as the writer judges it, from
// the parent's proxy: the ListenerSet's listeners are served by that proxy, no sooner. A
// ListenerSet in the Gateway's namespace gets the Gateway's message; one in another namespace
// gets the Gateway's name and reason only, as the message may hold what the proxy said about
// the Gateway namespace's objects (a NACK naming its Secrets), which that namespace's readers
// may not see.
func (w *Writer) withParent(cs *state.ClusterState, ls graph.ListenerSetStatus, gateways []graph.GatewayStatus, proxy gatewayProxy) gwapiv1.ListenerSetStatus {
	out := *ls.Status.DeepCopy()
	own := meta.FindStatusCondition(out.Conditions, string(gwapiv1.ListenerSetConditionProgrammed))
	src := cs.Gateways[ls.Gateway]
	if own == nil || own.Status != metav1.ConditionTrue || src == nil {
		return out
	}
	for _, gw := range gateways {
		if gw.Namespace != ls.Gateway.Namespace || gw.Name != ls.Gateway.Name {
			continue
		}
		programmed := meta.FindStatusCondition(Programmed(gw.Status.Conditions, w.proxyOf(cs, src, proxy)), string(gwapiv1.GatewayConditionProgrammed))
		if programmed != nil && programmed.Status != metav1.ConditionTrue {
			msg := fmt.Sprintf("Gateway %s is not programmed: %s", ls.Gateway, programmed.Message)
			if ls.Namespace != ls.Gateway.Namespace {
				msg = fmt.Sprintf("Gateway %s is not programmed (%s); its status says why", ls.Gateway, programmed.Reason)
			}
			c := conditions.NewListenerSetNotProgrammed(conditions.ReasonParentNotProgrammed, printable.Text(msg, MaxProxyMessage))
			c.ObservedGeneration = own.ObservedGeneration
			*own = c
		}
	}
	return out
}

// proxyOf is what Programmed judges a Gateway by, as writeGateway gathers it, with the
// Gateway's stored addresses standing in when it has no proxy Service.
func (w *Writer) proxyOf(cs *state.ClusterState, src *gwapiv1.Gateway, proxy gatewayProxy) Proxy {
	deployment, checkReady := proxy.service, true
	if proxy.shared {
		deployment = w.SharedProxyDeployment
		_, checkReady = cs.Deployments[deployment]
	}
	addresses := src.Status.Addresses
	if proxy.service != (types.NamespacedName{}) {
		addresses = Addresses(ownService(cs, src, proxy))
	}
	var applied Applied
	if w.Applied != nil {
		applied = w.Applied(scopeOf(src, proxy), state.Key(src), src.UID, src.Generation)
	}
	return Proxy{
		Addresses:  addresses,
		Requested:  graph.RequestedAddresses(src),
		CheckReady: checkReady,
		Deployment: ownDeployment(cs, src, proxy, deployment),
		Applied:    applied,
	}
}
