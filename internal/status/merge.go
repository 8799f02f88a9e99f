package status

import (
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Conditions returns want stamped from cur: the conditions are exactly those of want, in its
// order, and each keeps the LastTransitionTime of cur unless its status changed, in which case
// it gets now. Condition types only cur holds are not in the result: where the conditions are
// applied (a list keyed by type) they stay with whoever wrote them; where they are a part of an
// atomic entry (a route parent, a policy ancestor) the entry is ours and they go.
func Conditions(cur, want []metav1.Condition, now metav1.Time) []metav1.Condition {
	out := make([]metav1.Condition, 0, len(want))
	for _, c := range want {
		if old := meta.FindStatusCondition(cur, c.Type); old != nil {
			out = append(out, *old)
		}
		c.LastTransitionTime = now
		meta.SetStatusCondition(&out, c)
	}
	return out
}

// GatewayClass returns the status of a GatewayClass that we own: want, its conditions stamped
// with their transition times from cur. Whatever else cur holds is left to the API server's
// merge of what we apply.
func GatewayClass(cur, want gwapiv1.GatewayClassStatus, now metav1.Time) gwapiv1.GatewayClassStatus {
	return gwapiv1.GatewayClassStatus{
		Conditions:        Conditions(cur.Conditions, want.Conditions, now),
		SupportedFeatures: slices.Clone(want.SupportedFeatures),
	}
}

// Gateway returns the status of a Gateway that we own: want with the given addresses, its
// conditions and those of its listeners stamped with their transition times from cur.
// Conditions and listeners of other writers are not in it: applying it leaves them as they are.
func Gateway(cur, want gwapiv1.GatewayStatus, addresses []gwapiv1.GatewayStatusAddress, now metav1.Time) gwapiv1.GatewayStatus {
	next := gwapiv1.GatewayStatus{
		Addresses:            slices.Clone(addresses),
		Conditions:           Conditions(cur.Conditions, want.Conditions, now),
		AttachedListenerSets: want.AttachedListenerSets,
		Listeners:            make([]gwapiv1.ListenerStatus, 0, len(want.Listeners)),
	}
	for _, l := range want.Listeners {
		l = *l.DeepCopy()
		var old []metav1.Condition
		if i := slices.IndexFunc(cur.Listeners, func(c gwapiv1.ListenerStatus) bool { return c.Name == l.Name }); i >= 0 {
			old = cur.Listeners[i].Conditions
		}
		l.Conditions = Conditions(old, l.Conditions, now)
		next.Listeners = append(next.Listeners, l)
	}
	return next
}

// ListenerSet returns the status of a ListenerSet that we own: want, its conditions and those
// of its listeners stamped with their transition times from cur.
func ListenerSet(cur, want gwapiv1.ListenerSetStatus, now metav1.Time) gwapiv1.ListenerSetStatus {
	next := gwapiv1.ListenerSetStatus{
		Conditions: Conditions(cur.Conditions, want.Conditions, now),
		Listeners:  make([]gwapiv1.ListenerEntryStatus, 0, len(want.Listeners)),
	}
	for _, l := range want.Listeners {
		l = *l.DeepCopy()
		var old []metav1.Condition
		if i := slices.IndexFunc(cur.Listeners, func(c gwapiv1.ListenerEntryStatus) bool { return c.Name == l.Name }); i >= 0 {
			old = cur.Listeners[i].Conditions
		}
		l.Conditions = Conditions(old, l.Conditions, now)
		next.Listeners = append(next.Listeners, l)
	}
	return next
}

// RouteParents returns the parent statuses of a route: the entries of other controllers as they
// are, then ours as want says, in want's order. Our entries for parents want lacks are dropped.
// A route's status.parents is an atomic list (the CRDs declare no list-map keys for it), which
// any writer replaces whole: the writer sends this list with the resourceVersion it read it at.
func RouteParents(cur []gwapiv1.RouteParentStatus, controller gwapiv1.GatewayController, want []gwapiv1.RouteParentStatus, now metav1.Time) []gwapiv1.RouteParentStatus {
	out := make([]gwapiv1.RouteParentStatus, 0, len(cur)+len(want))
	for _, p := range cur {
		if p.ControllerName != controller {
			out = append(out, *p.DeepCopy())
		}
	}
	for _, p := range want {
		p = *p.DeepCopy()
		var old []metav1.Condition
		i := slices.IndexFunc(cur, func(c gwapiv1.RouteParentStatus) bool {
			return c.ControllerName == controller && equality.Semantic.DeepEqual(c.ParentRef, p.ParentRef)
		})
		if i >= 0 {
			old = cur[i].Conditions
		}
		p.Conditions = Conditions(old, p.Conditions, now)
		out = append(out, p)
	}
	return out
}

// maxPolicyAncestors is the most ancestor entries a policy status may hold, of all controllers.
const maxPolicyAncestors = 16

// PolicyAncestors returns the ancestor statuses of a policy: the entries of other controllers
// as they are, then ours as want says, in want's order, cut so that the list fits the API's
// limit of 16. Our entries for ancestors want lacks are dropped.
func PolicyAncestors(cur []gwapiv1.PolicyAncestorStatus, controller gwapiv1.GatewayController, want []gwapiv1.PolicyAncestorStatus, now metav1.Time) []gwapiv1.PolicyAncestorStatus {
	out := make([]gwapiv1.PolicyAncestorStatus, 0, len(cur)+len(want))
	for _, a := range cur {
		if a.ControllerName != controller {
			out = append(out, *a.DeepCopy())
		}
	}
	for _, a := range want {
		if len(out) >= maxPolicyAncestors {
			break
		}
		a = *a.DeepCopy()
		var old []metav1.Condition
		i := slices.IndexFunc(cur, func(c gwapiv1.PolicyAncestorStatus) bool {
			return c.ControllerName == controller && equality.Semantic.DeepEqual(c.AncestorRef, a.AncestorRef)
		})
		if i >= 0 {
			old = cur[i].Conditions
		}
		a.Conditions = Conditions(old, a.Conditions, now)
		out = append(out, a)
	}
	return out
}
