package controllers

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/graph/conditions"
)

// Tests that a route beyond its namespace's share of a scope's snapshot is refused in the status
// the API server stores: its parent is Accepted=False (SnapshotSizeLimitReached), the older
// route stays accepted, and the listener counts only the route it serves.
func TestRouteBeyondItsNamespaceShareOfTheSnapshotIsRefused(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPIWith(t, true, graph.Options{Namespace: ns, MaxRouteBytesPerNamespace: 32 << 10})
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	h.newBackend(ns, "echo", "10.1.2.3")
	h.create(newGateway(ns, "web", class))
	h.create(newHTTPRoute(ns, "a-small", []gwapiv1.ParentReference{parentRef(ns, "web")}, ns, "echo"))
	// About 64 kB of header values: more than the namespace's 32 KiB alone.
	big := newHTTPRoute(ns, "b-large", []gwapiv1.ParentReference{parentRef(ns, "web")}, ns, "echo")
	set := make([]gwapiv1.HTTPHeader, 16)
	for i := range set {
		set[i] = gwapiv1.HTTPHeader{Name: gwapiv1.HTTPHeaderName(fmt.Sprintf("x-h%d", i)), Value: strings.Repeat("v", 4000)}
	}
	big.Spec.Rules[0].Filters = []gwapiv1.HTTPRouteFilter{{
		Type: gwapiv1.HTTPRouteFilterRequestHeaderModifier, RequestHeaderModifier: &gwapiv1.HTTPHeaderFilter{Set: set},
	}}
	h.create(big)

	accepted := string(gwapiv1.RouteConditionAccepted)
	eventually(t, "the large route is refused", h.routeCondition(ns, "b-large", "web", accepted, metav1.ConditionFalse, conditions.ReasonSnapshotSizeLimitReached))
	eventually(t, "the small route is accepted", h.routeCondition(ns, "a-small", "web", accepted, metav1.ConditionTrue, ""))
	eventually(t, "the listener counts the route it serves", func() error {
		var gw gwapiv1.Gateway
		h.get(&gw, ns, "web")
		if len(gw.Status.Listeners) != 1 || gw.Status.Listeners[0].AttachedRoutes != 1 {
			return fmt.Errorf("listeners %+v", gw.Status.Listeners)
		}
		return nil
	})
}
