package controllers

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/graph/conditions"
)

func newListenerSet(ns, name, gatewayNS, gateway string, port gwapiv1.PortNumber, hostname string) *gwapiv1.ListenerSet {
	return &gwapiv1.ListenerSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gwapiv1.ListenerSetSpec{
			ParentRef: gwapiv1.ParentGatewayReference{
				Name: gwapiv1.ObjectName(gateway), Namespace: ptr.To(gwapiv1.Namespace(gatewayNS)),
			},
			Listeners: []gwapiv1.ListenerEntry{{
				Name: "extra", Port: port, Protocol: gwapiv1.HTTPProtocolType,
				Hostname: ptr.To(gwapiv1.Hostname(hostname)),
			}},
		},
	}
}

func listenerSetRef(ns, name string) gwapiv1.ParentReference {
	return gwapiv1.ParentReference{
		Group: ptr.To(gwapiv1.Group(gwapiv1.GroupName)), Kind: ptr.To(gwapiv1.Kind("ListenerSet")),
		Namespace: ptr.To(gwapiv1.Namespace(ns)), Name: gwapiv1.ObjectName(name),
	}
}

// listenerSetCondition checks one condition of a stored ListenerSet.
func (h *gatewayAPI) listenerSetCondition(ns, name, condType string, status metav1.ConditionStatus, reason string) func() error {
	return func() error {
		var ls gwapiv1.ListenerSet
		h.get(&ls, ns, name)
		return wantCondition(ls.Status.Conditions, condType, status, reason)
	}
}

// Tests, against the real API server, that a ListenerSet from a namespace the Gateway's
// allowedListeners does not admit is refused with NotAllowed first; that one it admits is
// Accepted and Programmed, counted in the Gateway's attachedListenerSets, takes a route through
// a ListenerSet parentRef, and puts its port on the Gateway's shared pool Service mapping and
// in the shared pool snapshot.
func TestListenerSetAttachesAsAllowedListenersSays(t *testing.T) {
	ns, other := newNamespace(t), newNamespace(t)
	h := startGatewayAPI(t, true, ns)
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	h.create(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: wellknown.SharedGatewayServiceName(ns, "web"),
			Annotations: map[string]string{graph.SharedServiceGatewayAnnotation: ns + "/web"},
		},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(20042)}}},
	})
	h.newBackend(ns, "echo", "10.1.2.3")
	gw := newGateway(ns, "web", class)
	gw.Spec.AllowedListeners = &gwapiv1.AllowedListeners{Namespaces: &gwapiv1.ListenerNamespaces{From: ptr.To(gwapiv1.NamespacesFromSame)}}
	h.create(gw)
	h.create(newListenerSet(other, "elsewhere", ns, "web", 8081, "other.example.com"))
	h.create(newListenerSet(ns, "extra", ns, "web", 8080, "extra.example.com"))
	h.create(newHTTPRoute(ns, "echo", []gwapiv1.ParentReference{listenerSetRef(ns, "extra")}, ns, "echo"))

	eventually(t, "the ListenerSet of another namespace is NotAllowed", errorsOf(
		h.listenerSetCondition(other, "elsewhere", string(gwapiv1.ListenerSetConditionAccepted), metav1.ConditionFalse, string(gwapiv1.ListenerSetReasonNotAllowed)),
		h.listenerSetCondition(other, "elsewhere", string(gwapiv1.ListenerSetConditionProgrammed), metav1.ConditionFalse, string(gwapiv1.ListenerSetReasonNotAllowed)),
	))
	eventually(t, "the ListenerSet of the Gateway's namespace is attached", errorsOf(
		h.listenerSetCondition(ns, "extra", string(gwapiv1.ListenerSetConditionAccepted), metav1.ConditionTrue, string(gwapiv1.ListenerSetReasonAccepted)),
		h.listenerSetCondition(ns, "extra", string(gwapiv1.ListenerSetConditionProgrammed), metav1.ConditionTrue, string(gwapiv1.ListenerSetReasonProgrammed)),
		func() error {
			var ls gwapiv1.ListenerSet
			h.get(&ls, ns, "extra")
			if len(ls.Status.Listeners) != 1 || ls.Status.Listeners[0].AttachedRoutes != 1 {
				return fmt.Errorf("listeners %+v, want extra with one route", ls.Status.Listeners)
			}
			return nil
		},
		func() error {
			var got gwapiv1.Gateway
			h.get(&got, ns, "web")
			if n := ptr.Deref(got.Status.AttachedListenerSets, -1); n != 1 {
				return fmt.Errorf("attachedListenerSets %d, want 1", n)
			}
			return nil
		},
	))
	eventually(t, "the route is accepted by the ListenerSet", h.routeCondition(ns, "echo", "extra", string(gwapiv1.RouteConditionAccepted), metav1.ConditionTrue, ""))
	eventually(t, "the shared pool serves the ListenerSet's port", func() error {
		keys, _ := h.keys(cache.SharedPool())
		if want := "listener/" + ns + "/web/8080"; !slices.Contains(keys, want) {
			return fmt.Errorf("keys %v, want %s", keys, want)
		}
		return nil
	})
}

func errorsOf(checks ...func() error) func() error {
	return func() error {
		errs := make([]error, 0, len(checks))
		for _, c := range checks {
			errs = append(errs, c())
		}
		return errors.Join(errs...)
	}
}

// Tests, against the real API server, that the caps of ListenerSets are written to the refused
// objects' status: a ListenerSet beyond MaxListenerSetsPerGateway is Accepted=False and
// Programmed=False (ListenerSetLimitReached), and a listener beyond MaxListenersPerPort is
// Accepted=False and Programmed=False (ListenerLimitReached) while its ListenerSet, whose other
// listener fits, stays attached.
func TestListenerSetsBeyondTheirCapsAreRefused(t *testing.T) {
	ns := newNamespace(t)
	opts := graph.Options{Namespace: ns, ListenerLimits: graph.ListenerLimits{MaxListenerSetsPerGateway: 1, MaxListenersPerPort: 2}}
	h := startGatewayAPIWith(t, true, opts)
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	gw := newGateway(ns, "web", class)
	gw.Spec.AllowedListeners = &gwapiv1.AllowedListeners{Namespaces: &gwapiv1.ListenerNamespaces{From: ptr.To(gwapiv1.NamespacesFromSame)}}
	h.create(gw)
	// Created in this order, and named so that the tie-break of equal creation times (whole
	// seconds) agrees: a-first is the older.
	first := newListenerSet(ns, "a-first", ns, "web", 80, "one.example.com")
	first.Spec.Listeners = append(first.Spec.Listeners, gwapiv1.ListenerEntry{
		Name: "late", Port: 80, Protocol: gwapiv1.HTTPProtocolType, Hostname: ptr.To(gwapiv1.Hostname("two.example.com")),
	})
	h.create(first)
	h.create(newListenerSet(ns, "b-second", ns, "web", 8080, "three.example.com"))

	accepted, programmed := string(gwapiv1.ListenerSetConditionAccepted), string(gwapiv1.ListenerSetConditionProgrammed)
	eventually(t, "the newer ListenerSet is refused", errorsOf(
		h.listenerSetCondition(ns, "b-second", accepted, metav1.ConditionFalse, conditions.ReasonListenerSetLimitReached),
		h.listenerSetCondition(ns, "b-second", programmed, metav1.ConditionFalse, conditions.ReasonListenerSetLimitReached),
	))
	eventually(t, "the older ListenerSet is attached, its second listener refused", func() error {
		var ls gwapiv1.ListenerSet
		h.get(&ls, ns, "a-first")
		errs := []error{wantCondition(ls.Status.Conditions, accepted, metav1.ConditionTrue, string(gwapiv1.ListenerSetReasonListenersNotValid))}
		for _, l := range ls.Status.Listeners {
			want, reason := metav1.ConditionTrue, string(gwapiv1.ListenerReasonProgrammed)
			if l.Name == "late" {
				want, reason = metav1.ConditionFalse, conditions.ReasonListenerLimitReached
				errs = append(errs, wantCondition(l.Conditions, string(gwapiv1.ListenerConditionAccepted), want, reason))
			}
			errs = append(errs, wantCondition(l.Conditions, string(gwapiv1.ListenerConditionProgrammed), want, reason))
		}
		if len(ls.Status.Listeners) != 2 {
			errs = append(errs, fmt.Errorf("listeners %+v", ls.Status.Listeners))
		}
		return errors.Join(errs...)
	})
}
