package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/rebuild"
	"coxswain.dev/coxswain/internal/status"
)

// foreignConditionType is a condition type no code of ours writes.
const foreignConditionType = "example.com/Audited"

// testClock is the status writer's clock in tests that check transition times.
type testClock struct{ at atomic.Pointer[time.Time] }

func newTestClock(at time.Time) *testClock {
	c := &testClock{}
	c.set(at)
	return c
}

func (c *testClock) set(at time.Time) { c.at.Store(&at) }
func (c *testClock) now() time.Time   { return *c.at.Load() }

// startWithClock runs the reconciler as the leader with the status writer on clock.
func startWithClock(t *testing.T, namespace string, clock *testClock) *gatewayAPI {
	t.Helper()
	return startGatewayAPIWriter(t, true, graph.Options{Namespace: namespace}, func(w *status.Writer) { w.Now = clock.now })
}

// foreignWriter is a client whose writes the API server records under another field manager,
// as another controller's.
func (h *gatewayAPI) foreignWriter() client.Client {
	return client.WithFieldOwner(h.c, "example.com/other-controller")
}

// editStatus re-reads obj's latest version, edits its status and updates it with c (retrying on
// conflicts with our writer), and leaves the stored object, as the update returned it, in obj.
func editStatus[T client.Object](t *testing.T, c client.Client, obj T, edit func(T)) {
	t.Helper()
	key := client.ObjectKeyFromObject(obj)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(context.Background(), key, obj); err != nil {
			return err
		}
		edit(obj)
		return c.Status().Update(context.Background(), obj)
	})
	if err != nil {
		t.Fatalf("update the status of %s: %v", key, err)
	}
}

// editSpec re-reads obj's latest version, edits it and updates it, retrying on conflicts.
func editSpec[T client.Object](t *testing.T, c client.Client, obj T, edit func(T)) {
	t.Helper()
	key := client.ObjectKeyFromObject(obj)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(context.Background(), key, obj); err != nil {
			return err
		}
		edit(obj)
		return c.Update(context.Background(), obj)
	})
	if err != nil {
		t.Fatalf("update %s: %v", key, err)
	}
}

func foreignCondition(generation int64) metav1.Condition {
	return metav1.Condition{
		Type: foreignConditionType, Status: metav1.ConditionTrue, Reason: "Seeded", Message: "theirs",
		ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)),
	}
}

// oursAtGeneration reports an error unless every condition of conds but the foreign one
// observed generation.
func oursAtGeneration(what string, conds []metav1.Condition, generation int64) error {
	if len(conds) == 0 {
		return fmt.Errorf("%s has no conditions", what)
	}
	for _, c := range conds {
		if c.Type != foreignConditionType && c.ObservedGeneration != generation {
			return fmt.Errorf("%s: %s observed generation %d, want %d", what, c.Type, c.ObservedGeneration, generation)
		}
	}
	return nil
}

// sameCondition reports an error unless conds hold want exactly.
func sameCondition(what string, conds []metav1.Condition, want metav1.Condition) error {
	got := meta.FindStatusCondition(conds, want.Type)
	if got == nil {
		return fmt.Errorf("%s: the %s condition is gone from %+v", what, want.Type, conds)
	}
	if diff := cmp.Diff(want, *got); diff != "" {
		return fmt.Errorf("%s: the %s condition changed (-seeded +stored):\n%s", what, want.Type, diff)
	}
	return nil
}

func listener(gw *gwapiv1.Gateway, name gwapiv1.SectionName) *gwapiv1.ListenerStatus {
	i := slices.IndexFunc(gw.Status.Listeners, func(l gwapiv1.ListenerStatus) bool { return l.Name == name })
	if i < 0 {
		return nil
	}
	return &gw.Status.Listeners[i]
}

// Tests, against the real API server, that a condition another controller put on a Gateway and
// on one of its listeners survives our status writes, untouched, through a change of the
// Gateway's spec that our conditions follow (their observedGeneration moves, their transition
// time does not, their status being the same).
func TestGatewayKeepsAnotherControllersConditions(t *testing.T) {
	ns := newNamespace(t)
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	clock := newTestClock(t0)
	h := startWithClock(t, "", clock)
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	h.create(newGateway(ns, "web", class))
	accepted := string(gwapiv1.GatewayConditionAccepted)
	eventually(t, "the Gateway and its listener are accepted", func() error {
		var gw gwapiv1.Gateway
		h.get(&gw, ns, "web")
		l := listener(&gw, "http")
		if l == nil {
			return fmt.Errorf("no status for listener http in %+v", gw.Status.Listeners)
		}
		return errors.Join(wantCondition(gw.Status.Conditions, accepted, metav1.ConditionTrue, ""),
			wantCondition(l.Conditions, string(gwapiv1.ListenerConditionAccepted), metav1.ConditionTrue, ""))
	})
	h.statusSettled()

	gw := &gwapiv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}
	editStatus(t, h.foreignWriter(), gw, func(gw *gwapiv1.Gateway) {
		gw.Status.Conditions = append(gw.Status.Conditions, foreignCondition(gw.Generation))
		l := listener(gw, "http")
		l.Conditions = append(l.Conditions, foreignCondition(gw.Generation))
	})
	seededGateway := *meta.FindStatusCondition(gw.Status.Conditions, foreignConditionType)
	seededListener := *meta.FindStatusCondition(listener(gw, "http").Conditions, foreignConditionType)

	clock.set(t0.Add(time.Hour))
	editSpec(t, h.c, gw, func(gw *gwapiv1.Gateway) {
		gw.Spec.Listeners[0].Hostname = ptr.To(gwapiv1.Hostname("second.example.com"))
	})
	generation := gw.Generation
	eventually(t, "our conditions follow the new generation beside theirs", func() error {
		var gw gwapiv1.Gateway
		h.get(&gw, ns, "web")
		l := listener(&gw, "http")
		if l == nil {
			return fmt.Errorf("no status for listener http in %+v", gw.Status.Listeners)
		}
		return errors.Join(
			oursAtGeneration("Gateway", gw.Status.Conditions, generation),
			oursAtGeneration("listener http", l.Conditions, generation),
			sameCondition("Gateway", gw.Status.Conditions, seededGateway),
			sameCondition("listener http", l.Conditions, seededListener),
		)
	})
	h.get(gw, ns, "web")
	if c := meta.FindStatusCondition(gw.Status.Conditions, accepted); c == nil || !c.LastTransitionTime.Equal(&metav1.Time{Time: t0}) {
		t.Errorf("Accepted stayed True but its transition time is %v, want %v", c, t0)
	}
	for _, c := range listener(gw, "http").Conditions {
		if c.Type != foreignConditionType && !c.LastTransitionTime.Equal(&metav1.Time{Time: t0}) {
			t.Errorf("listener condition %s kept its status but moved its transition time to %v, want %v", c.Type, c.LastTransitionTime, t0)
		}
	}
}

func foreignParent(ns string) gwapiv1.RouteParentStatus {
	return gwapiv1.RouteParentStatus{
		ParentRef: gwapiv1.ParentReference{
			Group: ptr.To(gwapiv1.Group(gwapiv1.GroupName)), Kind: ptr.To(gwapiv1.Kind("Gateway")),
			Namespace: ptr.To(gwapiv1.Namespace(ns)), Name: "unmanaged-gateway",
		},
		ControllerName: otherController,
		Conditions:     []metav1.Condition{foreignCondition(1)},
	}
}

// Tests, against the real API server, that another controller's entry in a route's
// status.parents (an atomic list, which every writer replaces whole) survives our writes
// untouched through a change of the route's spec; that an entry of our controller for a parent
// the route does not name is removed; and that our conditions keep their transition time while
// their status holds and take the writer's clock when it changes.
func TestRouteKeepsAnotherControllersParentAndLosesOurStaleOne(t *testing.T) {
	ns := newNamespace(t)
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	clock := newTestClock(t0)
	h := startWithClock(t, "", clock)
	h.acceptedRoute(ns)
	h.statusSettled()

	stale := gwapiv1.RouteParentStatus{
		ParentRef: parentRef(ns, "retired"), ControllerName: wellknown.GatewayControllerName,
		Conditions: []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", Message: "stale", LastTransitionTime: metav1.Now()}},
	}
	route := &gwapiv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "echo"}}
	editStatus(t, h.foreignWriter(), route, func(r *gwapiv1.HTTPRoute) {
		r.Status.Parents = append(r.Status.Parents, foreignParent(ns), stale)
	})
	seeded := route.Status.Parents[slices.IndexFunc(route.Status.Parents, func(p gwapiv1.RouteParentStatus) bool { return p.ControllerName == otherController })]

	clock.set(t0.Add(time.Hour))
	editSpec(t, h.c, route, func(r *gwapiv1.HTTPRoute) {
		r.Spec.Rules[0].Matches = []gwapiv1.HTTPRouteMatch{{Path: &gwapiv1.HTTPPathMatch{Type: ptr.To(gwapiv1.PathMatchPathPrefix), Value: ptr.To("/updated")}}}
	})
	generation := route.Generation
	eventually(t, "our entry follows the new generation beside theirs, and our stale one is gone", func() error {
		var r gwapiv1.HTTPRoute
		h.get(&r, ns, "echo")
		ours := ourParent(&r, "web")
		switch {
		case ours == nil:
			return fmt.Errorf("no entry of ours in %+v", r.Status.Parents)
		case ourParent(&r, "retired") != nil:
			return fmt.Errorf("our stale entry is still there: %+v", r.Status.Parents)
		case len(r.Status.Parents) != 2:
			return fmt.Errorf("parents %+v, want ours and theirs", r.Status.Parents)
		}
		i := slices.IndexFunc(r.Status.Parents, func(p gwapiv1.RouteParentStatus) bool { return p.ControllerName == otherController })
		if i < 0 {
			return fmt.Errorf("their entry is gone: %+v", r.Status.Parents)
		}
		if diff := cmp.Diff(seeded, r.Status.Parents[i]); diff != "" {
			return fmt.Errorf("their entry changed (-seeded +stored):\n%s", diff)
		}
		return oursAtGeneration("our parent entry", ours.Conditions, generation)
	})
	h.get(route, ns, "echo")
	resolved := string(gwapiv1.RouteConditionResolvedRefs)
	for _, c := range ourParent(route, "web").Conditions {
		if !c.LastTransitionTime.Equal(&metav1.Time{Time: t0}) {
			t.Errorf("route condition %s kept its status but moved its transition time to %v, want %v", c.Type, c.LastTransitionTime, t0)
		}
	}

	t1 := t0.Add(2 * time.Hour)
	clock.set(t1)
	if err := h.c.Delete(context.Background(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "echo"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the route's references no longer resolve", h.routeCondition(ns, "echo", "web", resolved, metav1.ConditionFalse, string(gwapiv1.RouteReasonBackendNotFound)))
	h.get(route, ns, "echo")
	for _, c := range ourParent(route, "web").Conditions {
		want := t0
		if c.Type == resolved {
			want = t1
		}
		if !c.LastTransitionTime.Equal(&metav1.Time{Time: want}) {
			t.Errorf("route condition %s (%s) has transition time %v, want %v", c.Type, c.Status, c.LastTransitionTime, want)
		}
	}
}

// Tests, against the real API server, that another controller's ancestor entry on a
// BackendTLSPolicy survives our writes untouched through a change of the policy's spec, and
// that an ancestor entry of ours for a Gateway that does not use the policy is removed.
func TestBackendTLSPolicyKeepsAnotherControllersAncestor(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, "")
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	h.newBackend(ns, "secure", "10.1.2.3")
	h.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "backend-ca"}, Data: map[string]string{"ca.crt": caPEM(t)}})
	h.create(newGateway(ns, "web", class))
	h.create(newHTTPRoute(ns, "secure", []gwapiv1.ParentReference{parentRef(ns, "web")}, ns, "secure"))
	h.create(&gwapiv1.BackendTLSPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "secure"},
		Spec: gwapiv1.BackendTLSPolicySpec{
			TargetRefs: []gwapiv1.LocalPolicyTargetReferenceWithSectionName{{
				LocalPolicyTargetReference: gwapiv1.LocalPolicyTargetReference{Kind: "Service", Name: "secure"},
			}},
			Validation: gwapiv1.BackendTLSPolicyValidation{
				CACertificateRefs: []gwapiv1.LocalObjectReference{{Kind: "ConfigMap", Name: "backend-ca"}},
				Hostname:          "secure.example.com",
			},
		},
	})
	accepted := string(gwapiv1.PolicyConditionAccepted)
	eventually(t, "the policy is accepted", h.policyCondition(ns, "secure", "web", accepted, metav1.ConditionTrue, ""))
	h.statusSettled()

	theirs := gwapiv1.PolicyAncestorStatus{
		AncestorRef: foreignParent(ns).ParentRef, ControllerName: otherController,
		Conditions: []metav1.Condition{foreignCondition(1)},
	}
	stale := gwapiv1.PolicyAncestorStatus{
		AncestorRef: parentRef(ns, "retired"), ControllerName: wellknown.GatewayControllerName,
		Conditions: []metav1.Condition{{Type: accepted, Status: metav1.ConditionTrue, Reason: "Accepted", Message: "stale", LastTransitionTime: metav1.Now()}},
	}
	policy := &gwapiv1.BackendTLSPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "secure"}}
	editStatus(t, h.foreignWriter(), policy, func(p *gwapiv1.BackendTLSPolicy) {
		p.Status.Ancestors = append(p.Status.Ancestors, theirs, stale)
	})
	seeded := policy.Status.Ancestors[slices.IndexFunc(policy.Status.Ancestors, func(a gwapiv1.PolicyAncestorStatus) bool { return a.ControllerName == otherController })]

	editSpec(t, h.c, policy, func(p *gwapiv1.BackendTLSPolicy) { p.Spec.Validation.Hostname = "second.example.com" })
	generation := policy.Generation
	eventually(t, "our ancestor follows the new generation beside theirs, and our stale one is gone", func() error {
		var p gwapiv1.BackendTLSPolicy
		h.get(&p, ns, "secure")
		var ours, foreign []gwapiv1.PolicyAncestorStatus
		for _, a := range p.Status.Ancestors {
			if a.ControllerName == otherController {
				foreign = append(foreign, a)
			} else {
				ours = append(ours, a)
			}
		}
		if len(ours) != 1 || ours[0].AncestorRef.Name != "web" {
			return fmt.Errorf("our ancestors %+v, want the one for web", ours)
		}
		if len(foreign) != 1 {
			return fmt.Errorf("their ancestors %+v, want the seeded one", foreign)
		}
		if diff := cmp.Diff(seeded, foreign[0]); diff != "" {
			return fmt.Errorf("their entry changed (-seeded +stored):\n%s", diff)
		}
		return oursAtGeneration("our ancestor entry", ours[0].Conditions, generation)
	})
}

// Tests, against the real API server, that a condition another controller put on a ListenerSet
// survives our writes untouched through a change of the ListenerSet's spec.
func TestListenerSetKeepsAnotherControllersConditions(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, "")
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	gw := newGateway(ns, "web", class)
	gw.Spec.AllowedListeners = &gwapiv1.AllowedListeners{Namespaces: &gwapiv1.ListenerNamespaces{From: ptr.To(gwapiv1.NamespacesFromSame)}}
	h.create(gw)
	h.create(newListenerSet(ns, "extra", ns, "web", 8080, "extra.example.com"))
	eventually(t, "the ListenerSet is accepted", h.listenerSetCondition(ns, "extra", string(gwapiv1.ListenerSetConditionAccepted), metav1.ConditionTrue, ""))
	h.statusSettled()

	ls := &gwapiv1.ListenerSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "extra"}}
	editStatus(t, h.foreignWriter(), ls, func(ls *gwapiv1.ListenerSet) {
		ls.Status.Conditions = append(ls.Status.Conditions, foreignCondition(ls.Generation))
	})
	seeded := *meta.FindStatusCondition(ls.Status.Conditions, foreignConditionType)
	editSpec(t, h.c, ls, func(ls *gwapiv1.ListenerSet) {
		ls.Spec.Listeners[0].Hostname = ptr.To(gwapiv1.Hostname("second.example.com"))
	})
	generation := ls.Generation
	eventually(t, "our conditions follow the new generation beside theirs", func() error {
		var ls gwapiv1.ListenerSet
		h.get(&ls, ns, "extra")
		return errors.Join(oursAtGeneration("ListenerSet", ls.Status.Conditions, generation), sameCondition("ListenerSet", ls.Status.Conditions, seeded))
	})
}

// legacyManager stands for the field manager our status patches had before they were applied.
const legacyManager = "coxswain-before-apply"

// seedLegacyStatus writes the status of the Gateway ns/name as an earlier release did, under
// manager: our conditions and a listener "retired" the spec no longer has.
func seedLegacyStatus(t *testing.T, c client.Client, ns, name, manager string) {
	t.Helper()
	gw := &gwapiv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	editStatus(t, client.WithFieldOwner(c, manager), gw, func(gw *gwapiv1.Gateway) {
		at := metav1.NewTime(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
		cond := func(t string) metav1.Condition {
			return metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: t, Message: "before", ObservedGeneration: gw.Generation, LastTransitionTime: at}
		}
		gw.Status.Conditions = []metav1.Condition{cond("Accepted"), cond("Programmed")}
		gw.Status.Listeners = []gwapiv1.ListenerStatus{
			{Name: "http", Conditions: []metav1.Condition{cond("Accepted")}},
			{Name: "retired", Conditions: []metav1.Condition{cond("Accepted")}},
		}
	})
}

// Tests, against the real API server, that what the writer's earlier, patching self wrote and
// the writer no longer computes goes from a Gateway's status: a listener the spec lost before
// the upgrade, and one it loses after, which the earlier manager and the apply manager share;
// while on a Gateway where another manager wrote the same, the listener stays theirs.
func TestStatusOfTheEarlierPatchingWriterIsRemoved(t *testing.T) {
	ns := newNamespace(t)
	class := "class-" + ns + "-ours"
	gc := &gwapiv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Spec: gwapiv1.GatewayClassSpec{ControllerName: wellknown.GatewayControllerName}}
	c := newGatewayClient(t)
	if err := c.Create(context.Background(), gc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), gc) })
	for _, name := range []string{"upgraded", "control"} {
		if err := c.Create(context.Background(), newGateway(ns, name, class)); err != nil {
			t.Fatal(err)
		}
	}
	seedLegacyStatus(t, c, ns, "upgraded", legacyManager)
	seedLegacyStatus(t, c, ns, "control", "example.com/other-controller")

	h := startGatewayAPIWriter(t, true, graph.Options{}, func(w *status.Writer) { w.LegacyFieldManager = legacyManager })
	eventually(t, "our status replaces the earlier one", func() error {
		var gw gwapiv1.Gateway
		h.get(&gw, ns, "upgraded")
		if names := listenerNames(&gw); !slices.Equal(names, []gwapiv1.SectionName{"http"}) {
			var managers []string
			for _, m := range gw.ManagedFields {
				managers = append(managers, fmt.Sprintf("%s/%s/%s: %s", m.Manager, m.Operation, m.Subresource, m.FieldsV1.GetRawString()))
			}
			return fmt.Errorf("listeners %v, want http alone; managers %v", names, managers)
		}
		return oursAtGeneration("Gateway", gw.Status.Conditions, gw.Generation)
	})
	// The earlier manager still owns parts of listener http beside us: renaming the listener
	// must remove it all the same.
	upgraded := &gwapiv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "upgraded"}}
	editSpec(t, h.c, upgraded, func(gw *gwapiv1.Gateway) { gw.Spec.Listeners[0].Name = "renamed" })
	eventually(t, "the renamed listener replaces the one the earlier manager shared", func() error {
		var gw gwapiv1.Gateway
		h.get(&gw, ns, "upgraded")
		if names := listenerNames(&gw); !slices.Equal(names, []gwapiv1.SectionName{"renamed"}) {
			return fmt.Errorf("listeners %v, want renamed alone", names)
		}
		return nil
	})
	h.statusSettled()
	var control gwapiv1.Gateway
	h.get(&control, ns, "control")
	if names := listenerNames(&control); !slices.Contains(names, "retired") {
		t.Errorf("listeners of the control Gateway %v: another manager's listener was removed", names)
	}
}

func listenerNames(gw *gwapiv1.Gateway) []gwapiv1.SectionName {
	names := make([]gwapiv1.SectionName, 0, len(gw.Status.Listeners))
	for _, l := range gw.Status.Listeners {
		names = append(names, l.Name)
	}
	return names
}

// Tests, against the real API server, that a condition of ours on a Gateway that another writer
// changed is ours again at the next rebuild, though nothing we compute changed: the apply
// manager lost the fields the other writer set, so what it owns is no longer what we want.
func TestGatewayConditionChangedByAnotherWriterIsRestored(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, "")
	h.acceptedRoute(ns)
	h.statusSettled()

	accepted := string(gwapiv1.GatewayConditionAccepted)
	gw := &gwapiv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}
	editStatus(t, h.foreignWriter(), gw, func(gw *gwapiv1.Gateway) {
		c := meta.FindStatusCondition(gw.Status.Conditions, accepted)
		c.Status, c.Reason = metav1.ConditionFalse, "Tampered"
	})
	h.rebuildSeeing("the tampered condition", func(in rebuild.Input) bool {
		g := in.State.Gateways[types.NamespacedName{Namespace: ns, Name: "web"}]
		if g == nil {
			return false
		}
		c := meta.FindStatusCondition(g.Status.Conditions, accepted)
		return c != nil && c.Reason == "Tampered"
	}, ns)
	eventually(t, "the Gateway is accepted again", func() error {
		h.get(gw, ns, "web")
		return wantCondition(gw.Status.Conditions, accepted, metav1.ConditionTrue, string(gwapiv1.GatewayReasonAccepted))
	})
}

// Tests, against the real API server, that a Gateway that changed only by another writer's
// condition costs no status write at the next rebuild: what our field manager owns in it is
// still what we compute.
func TestForeignConditionCostsNoStatusWrite(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, "")
	h.acceptedRoute(ns)
	written := h.statusSettled()

	gw := &gwapiv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}
	editStatus(t, h.foreignWriter(), gw, func(gw *gwapiv1.Gateway) {
		gw.Status.Conditions = append(gw.Status.Conditions, foreignCondition(gw.Generation))
	})
	version := gw.ResourceVersion
	// Fails the test unless a rebuild saw the Gateway with the foreign condition: without one
	// the test would prove nothing.
	h.rebuildSeeing("the Gateway with the foreign condition", func(in rebuild.Input) bool {
		cached := in.State.Gateways[client.ObjectKeyFromObject(gw)]
		return cached != nil && cached.ResourceVersion == version
	}, ns)
	if n := h.statusSettled() - written; n != 0 {
		t.Errorf("a foreign condition cost %d status writes", n)
	}
	h.get(gw, ns, "web")
	if gw.ResourceVersion != version {
		t.Errorf("the Gateway's resourceVersion moved from %s to %s", version, gw.ResourceVersion)
	}
}

// Tests, against the real API server, that a listener the spec no longer has goes from the
// Gateway's status though another writer put a condition on it: an entry of status.listeners
// stands for a listener of the spec, and one that kept only another writer's condition would
// lack the attachedRoutes the schema requires, failing every apply of ours.
func TestListenerGoneFromTheSpecGoesWithAnotherWritersCondition(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, "")
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	h.create(newGateway(ns, "web", class))
	eventually(t, "the listener is accepted", func() error {
		var gw gwapiv1.Gateway
		h.get(&gw, ns, "web")
		if l := listener(&gw, "http"); l == nil {
			return fmt.Errorf("no status for listener http in %+v", gw.Status.Listeners)
		}
		return nil
	})
	h.statusSettled()
	gw := &gwapiv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}
	editStatus(t, h.foreignWriter(), gw, func(gw *gwapiv1.Gateway) {
		l := listener(gw, "http")
		l.Conditions = append(l.Conditions, foreignCondition(gw.Generation))
		gw.Status.Conditions = append(gw.Status.Conditions, foreignCondition(gw.Generation))
	})
	seeded := *meta.FindStatusCondition(gw.Status.Conditions, foreignConditionType)
	editSpec(t, h.c, gw, func(gw *gwapiv1.Gateway) { gw.Spec.Listeners[0].Name = "renamed" })
	generation := gw.Generation
	eventually(t, "the renamed listener replaces the old one", func() error {
		var gw gwapiv1.Gateway
		h.get(&gw, ns, "web")
		if names := listenerNames(&gw); !slices.Equal(names, []gwapiv1.SectionName{"renamed"}) {
			return fmt.Errorf("listeners %v, want renamed alone", names)
		}
		return errors.Join(oursAtGeneration("Gateway", gw.Status.Conditions, generation), sameCondition("Gateway", gw.Status.Conditions, seeded))
	})
}
