package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/pkg/consts"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/stream"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/rebuild"
)

const otherController = gwapiv1.GatewayController("example.com/other-controller")

func TestGatewayClassOfOursIsAcceptedAndOthersAreUntouched(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, "")
	theirs := h.newGatewayClass(ns, otherController)
	ours := h.newGatewayClass(ns, wellknown.GatewayControllerName)

	eventually(t, "our GatewayClass is accepted", func() error {
		var gc gwapiv1.GatewayClass
		h.get(&gc, "", ours)
		if len(gc.Status.SupportedFeatures) == 0 {
			return errors.New("no supportedFeatures")
		}
		return errors.Join(
			wantCondition(gc.Status.Conditions, string(gwapiv1.GatewayClassConditionStatusAccepted), metav1.ConditionTrue, string(gwapiv1.GatewayClassReasonAccepted)),
			wantCondition(gc.Status.Conditions, string(gwapiv1.GatewayClassConditionStatusSupportedVersion), metav1.ConditionTrue, string(gwapiv1.GatewayClassReasonSupportedVersion)),
		)
	})
	rec := h.rebuiltWith("both classes", func(in rebuild.Input) bool {
		_, a := in.State.GatewayClasses[types.NamespacedName{Name: theirs}]
		_, b := in.State.GatewayClasses[types.NamespacedName{Name: ours}]
		return a && b
	})
	if rec.in.CRDBundleVersion != consts.BundleVersion {
		t.Errorf("CRD bundle version %q read from the cluster, want %q", rec.in.CRDBundleVersion, consts.BundleVersion)
	}
	var gc gwapiv1.GatewayClass
	h.get(&gc, "", theirs)
	if err := wantCondition(gc.Status.Conditions, string(gwapiv1.GatewayClassConditionStatusAccepted), metav1.ConditionUnknown, "Pending"); err != nil || len(gc.Status.SupportedFeatures) != 0 {
		t.Errorf("another controller's GatewayClass was written: %v, features %v", err, gc.Status.SupportedFeatures)
	}
}

func TestOnlyTLSSecretsAreRead(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, "")
	h.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "opaque"}, StringData: map[string]string{"password": "hunter2"}})
	h.create(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tls"},
		Type:       corev1.SecretTypeTLS,
		StringData: map[string]string{corev1.TLSCertKey: "cert", corev1.TLSPrivateKeyKey: "key"},
	})
	rec := h.rebuiltWith("the TLS Secret", func(in rebuild.Input) bool {
		_, ok := in.State.Secrets[types.NamespacedName{Namespace: ns, Name: "tls"}]
		return ok
	})
	if _, ok := rec.in.State.Secrets[types.NamespacedName{Namespace: ns, Name: "opaque"}]; ok {
		t.Error("an Opaque Secret reached the pipeline")
	}
}

func TestGatewayAndRouteProgramTheSharedPool(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, ns)
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	// The Gateway's Service on the shared pool, as the provisioner makes it, in the operator's
	// namespace (here the test's).
	h.create(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: wellknown.SharedGatewayServiceName(ns, "web"),
			Annotations: map[string]string{graph.SharedServiceGatewayAnnotation: ns + "/web"},
		},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(20042)}}},
	})
	h.newBackend(ns, "echo", "10.1.2.3")
	h.create(newGateway(ns, "web", class))
	h.create(newHTTPRoute(ns, "echo", []gwapiv1.ParentReference{parentRef(ns, "web")}, ns, "echo"))

	eventually(t, "the Gateway is accepted and programmed", func() error {
		var gw gwapiv1.Gateway
		h.get(&gw, ns, "web")
		if len(gw.Status.Listeners) != 1 || gw.Status.Listeners[0].AttachedRoutes != 1 {
			return fmt.Errorf("listeners %+v", gw.Status.Listeners)
		}
		if len(gw.Status.Addresses) != 1 || gw.Status.Addresses[0].Value == "" {
			return fmt.Errorf("addresses %+v, want the proxy Service's cluster IP", gw.Status.Addresses)
		}
		return errors.Join(
			wantCondition(gw.Status.Conditions, string(gwapiv1.GatewayConditionAccepted), metav1.ConditionTrue, ""),
			wantCondition(gw.Status.Conditions, string(gwapiv1.GatewayConditionProgrammed), metav1.ConditionTrue, ""),
		)
	})
	eventually(t, "the route is accepted", h.routeCondition(ns, "echo", "web", string(gwapiv1.RouteConditionAccepted), metav1.ConditionTrue, ""))
	eventually(t, "the route's references resolve", h.routeCondition(ns, "echo", "web", string(gwapiv1.RouteConditionResolvedRefs), metav1.ConditionTrue, ""))

	listener, cluster := "listener/"+ns+"/web/80", "cluster/"+ns+"/echo:80"
	var version string
	eventually(t, "the shared pool snapshot holds the listener and cluster", func() error {
		var keys []string
		keys, version = h.keys(cache.SharedPool())
		if !slices.Contains(keys, listener) || !slices.Contains(keys, cluster) || version == "" {
			return fmt.Errorf("keys %v, version %q", keys, version)
		}
		return nil
	})

	touch(t, h.c, &corev1.Service{}, ns, "echo", "unrelated", "1")
	rec := h.rebuiltWith("the relabelled Service", serviceLabelled(ns, "echo", "unrelated", "1"))
	if _, after := h.keys(cache.SharedPool()); after != version || slices.Contains(rec.res.Changed, cache.SharedPool()) {
		t.Fatalf("an unrelated change moved the shared pool version from %s to %s", version, after)
	}

	var slice discoveryv1.EndpointSlice
	h.get(&slice, ns, "echo-1")
	slice.Endpoints[0].Addresses = []string{"10.1.2.4"}
	if err := h.c.Update(context.Background(), &slice); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a new endpoint changes the version", func() error {
		if _, v := h.keys(cache.SharedPool()); v == version {
			return errors.New("version unchanged")
		}
		return nil
	})
}

func TestRouteToAMissingServiceIsBackendNotFound(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, "")
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	h.create(newGateway(ns, "web", class))
	h.create(newHTTPRoute(ns, "broken", []gwapiv1.ParentReference{parentRef(ns, "web")}, ns, "missing"))

	eventually(t, "the route reports BackendNotFound", h.routeCondition(ns, "broken", "web",
		string(gwapiv1.RouteConditionResolvedRefs), metav1.ConditionFalse, string(gwapiv1.RouteReasonBackendNotFound)))
}

func TestCrossNamespaceBackendNeedsAReferenceGrant(t *testing.T) {
	ns, backends := newNamespace(t), newNamespace(t)
	h := startGatewayAPI(t, true, "")
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	h.newBackend(backends, "echo", "10.1.2.3")
	h.create(newGateway(ns, "web", class))
	h.create(newHTTPRoute(ns, "cross", []gwapiv1.ParentReference{parentRef(ns, "web")}, backends, "echo"))

	eventually(t, "the route reports RefNotPermitted", h.routeCondition(ns, "cross", "web",
		string(gwapiv1.RouteConditionResolvedRefs), metav1.ConditionFalse, string(gwapiv1.RouteReasonRefNotPermitted)))

	h.create(&gwapiv1.ReferenceGrant{
		ObjectMeta: metav1.ObjectMeta{Namespace: backends, Name: "from-" + ns},
		Spec: gwapiv1.ReferenceGrantSpec{
			From: []gwapiv1.ReferenceGrantFrom{{Group: gwapiv1.GroupName, Kind: "HTTPRoute", Namespace: gwapiv1.Namespace(ns)}},
			To:   []gwapiv1.ReferenceGrantTo{{Group: "", Kind: "Service"}},
		},
	})
	eventually(t, "the grant resolves the reference", h.routeCondition(ns, "cross", "web",
		string(gwapiv1.RouteConditionResolvedRefs), metav1.ConditionTrue, string(gwapiv1.RouteReasonResolvedRefs)))
}

func TestAnotherControllersParentEntryIsPreserved(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, "")
	ours := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	theirs := h.newGatewayClass(ns, otherController)
	h.newBackend(ns, "echo", "10.1.2.3")
	h.create(newGateway(ns, "web", ours))
	h.create(newGateway(ns, "other", theirs))
	route := newHTTPRoute(ns, "both", []gwapiv1.ParentReference{parentRef(ns, "web"), parentRef(ns, "other")}, ns, "echo")
	h.create(route)
	theirEntry := gwapiv1.RouteParentStatus{
		ParentRef:      parentRef(ns, "other"),
		ControllerName: otherController,
		Conditions: []metav1.Condition{{
			Type: string(gwapiv1.RouteConditionAccepted), Status: metav1.ConditionTrue, Reason: "Accepted",
			Message: "theirs", ObservedGeneration: 1, LastTransitionTime: metav1.Now(),
		}},
	}
	setRouteParents(t, h.c, ns, "both", func(parents []gwapiv1.RouteParentStatus) []gwapiv1.RouteParentStatus {
		return append(parents, theirEntry)
	})

	theirsKept := func(r *gwapiv1.HTTPRoute) error {
		for _, p := range r.Status.Parents {
			if p.ControllerName == otherController {
				if p.Conditions[0].Message != "theirs" {
					return fmt.Errorf("their entry changed: %+v", p)
				}
				return nil
			}
		}
		return fmt.Errorf("their entry is gone: %+v", r.Status.Parents)
	}
	eventually(t, "our entry is written beside theirs", func() error {
		var r gwapiv1.HTTPRoute
		h.get(&r, ns, "both")
		if p := ourParent(&r, "web"); p == nil || len(r.Status.Parents) != 2 {
			return fmt.Errorf("parents %+v", r.Status.Parents)
		}
		return theirsKept(&r)
	})

	var r gwapiv1.HTTPRoute
	h.get(&r, ns, "both")
	r.Spec.ParentRefs = r.Spec.ParentRefs[1:]
	if err := h.c.Update(context.Background(), &r); err != nil {
		t.Fatal(err)
	}
	eventually(t, "our entry is removed when the route leaves our Gateway", func() error {
		var r gwapiv1.HTTPRoute
		h.get(&r, ns, "both")
		if p := ourParent(&r, "web"); p != nil || len(r.Status.Parents) != 1 {
			return fmt.Errorf("parents %+v", r.Status.Parents)
		}
		return theirsKept(&r)
	})
}

func TestStatusIsNotRewrittenWhenNothingChanged(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, "")
	class := h.acceptedRoute(ns)

	versions := func() []string {
		var (
			gc gwapiv1.GatewayClass
			gw gwapiv1.Gateway
			r  gwapiv1.HTTPRoute
		)
		h.get(&gc, "", class)
		h.get(&gw, ns, "web")
		h.get(&r, ns, "echo")
		return []string{gc.ResourceVersion, gw.ResourceVersion, r.ResourceVersion}
	}
	written := h.statusSettled()
	before := versions()
	touch(t, h.c, &corev1.Service{}, ns, "echo", "touched", "1")
	h.rebuiltWith("the relabelled Service", serviceLabelled(ns, "echo", "touched", "1"))
	if n := h.statusSettled() - written; n != 0 {
		t.Errorf("a rebuild of an unchanged world wrote %d statuses", n)
	}
	if after := versions(); !slices.Equal(before, after) {
		t.Errorf("resourceVersions moved from %v to %v", before, after)
	}
}

func TestFollowerFillsTheCacheButWritesNoStatus(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, false, "")
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	h.create(newGateway(ns, "web", class))

	listener := "listener/" + ns + "/web/80"
	eventually(t, "the follower's cache holds the listener", func() error {
		if keys, _ := h.keys(cache.SharedPool()); !slices.Contains(keys, listener) {
			return fmt.Errorf("keys %v", keys)
		}
		return nil
	})
	var gw gwapiv1.Gateway
	h.get(&gw, ns, "web")
	if err := wantCondition(gw.Status.Conditions, string(gwapiv1.GatewayConditionAccepted), metav1.ConditionUnknown, "Pending"); err != nil {
		t.Fatalf("a follower wrote status: %v", err)
	}

	h.leader.Store(true)
	h.debouncer.Trigger()
	eventually(t, "the new leader writes status", func() error {
		var gw gwapiv1.Gateway
		h.get(&gw, ns, "web")
		return wantCondition(gw.Status.Conditions, string(gwapiv1.GatewayConditionAccepted), metav1.ConditionTrue, "")
	})
}

func TestDedicatedGatewayGetsItsOwnScopeUntilDeleted(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, "")
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	h.create(&v1alpha1.CoxswainGatewayParameters{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "big"}})
	gw := newGateway(ns, "edge", class)
	gw.Spec.Infrastructure = &gwapiv1.GatewayInfrastructure{ParametersRef: &gwapiv1.LocalParametersReference{
		Group: "gateway.coxswain.dev", Kind: "CoxswainGatewayParameters", Name: "big",
	}}

	if _, err := h.auth.ExpectedServiceAccount(ns, "edge"); err == nil {
		t.Fatal("the authority answered for a Gateway that does not exist yet")
	}
	h.create(gw)
	scope := cache.Gateway(ns, "edge")
	listener := "listener/" + ns + "/edge/80"
	eventually(t, "the dedicated scope holds the listener", func() error {
		if keys, _ := h.keys(scope); !slices.Equal(keys, []string{listener}) {
			return fmt.Errorf("keys %v", keys)
		}
		return nil
	})
	if keys, _ := h.keys(cache.SharedPool()); slices.Contains(keys, listener) {
		t.Errorf("the shared pool serves the dedicated Gateway: %v", keys)
	}
	if sa, err := h.auth.ExpectedServiceAccount(ns, "edge"); err != nil || sa != "edge-"+class {
		t.Fatalf("authority answers %q, %v; want %q", sa, err, "edge-"+class)
	}

	revocations := h.revocations.Load()
	if err := h.c.Delete(context.Background(), gw); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleted Gateway is unknown", func() error {
		if _, err := h.auth.ExpectedServiceAccount(ns, "edge"); !errors.Is(err, stream.ErrUnknownGateway) {
			return fmt.Errorf("authority answers %w", err)
		}
		return nil
	})
	if h.revocations.Load() == revocations {
		t.Error("the revocation hook did not run")
	}
	if h.cache.Get(scope) != nil {
		t.Error("the deleted Gateway's scope is still in the cache")
	}
}

// touch sets a label on an object, a change that affects no output.
func touch(t *testing.T, c client.Client, obj client.Object, ns, name, key, value string) {
	t.Helper()
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, obj); err != nil {
		t.Fatal(err)
	}
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[key] = value
	obj.SetLabels(labels)
	if err := c.Update(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
}

func serviceLabelled(ns, name, key, value string) func(rebuild.Input) bool {
	return func(in rebuild.Input) bool {
		svc := in.State.Services[types.NamespacedName{Namespace: ns, Name: name}]
		return svc != nil && svc.Labels[key] == value
	}
}

// setRouteParents rewrites a route's status parents as another controller would.
func setRouteParents(t *testing.T, c client.Client, ns, name string, edit func([]gwapiv1.RouteParentStatus) []gwapiv1.RouteParentStatus) {
	t.Helper()
	eventually(t, "write the route status", func() error {
		var r gwapiv1.HTTPRoute
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &r); err != nil {
			return err
		}
		r.Status.Parents = edit(r.Status.Parents)
		return c.Status().Update(context.Background(), &r)
	})
}

// Tests that a Service and EndpointSlice no route references change without a rebuild, and
// that they cost one as soon as a route references them.
func TestUnreferencedServiceChurnCostsNoRebuild(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, ns)
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	h.newBackend(ns, "echo", "10.1.2.3")
	h.newBackend(ns, "idle", "10.1.2.9")
	h.create(newGateway(ns, "web", class))
	h.create(newHTTPRoute(ns, "echo", []gwapiv1.ParentReference{parentRef(ns, "web")}, ns, "echo"))
	h.rebuiltWith("the route", func(in rebuild.Input) bool {
		return in.State.HTTPRoutes[types.NamespacedName{Namespace: ns, Name: "echo"}] != nil
	})
	before := h.quiet()

	for i := range 5 {
		touch(t, h.c, &corev1.Service{}, ns, "idle", "churn", strconv.Itoa(i))
		touch(t, h.c, &discoveryv1.EndpointSlice{}, ns, "idle-1", "churn", strconv.Itoa(i))
	}
	// A change that matters, after the churn: its rebuild sees the churn in the cache, and no
	// rebuild before it may have been started by the churn.
	touch(t, h.c, &corev1.Service{}, ns, "echo", "barrier", "1")
	h.rebuiltWith("the barrier", serviceLabelled(ns, "echo", "barrier", "1"))
	h.mu.Lock()
	after := slices.Clone(h.records[before:])
	h.mu.Unlock()
	for i, rec := range after {
		if !serviceLabelled(ns, "echo", "barrier", "1")(rec.in) {
			t.Errorf("rebuild %d after the route settled did not see the barrier: started by churn of an unreferenced Service", before+i)
		}
	}
	if !serviceLabelled(ns, "idle", "churn", "4")(after[0].in) {
		t.Fatal("the barrier's rebuild did not see the churn: the test proved nothing")
	}

	// Once a route references it, the same churn rebuilds.
	h.create(newHTTPRoute(ns, "idle", []gwapiv1.ParentReference{parentRef(ns, "web")}, ns, "idle"))
	h.rebuiltWith("the second route", func(in rebuild.Input) bool {
		return in.State.HTTPRoutes[types.NamespacedName{Namespace: ns, Name: "idle"}] != nil
	})
	h.quiet()
	touch(t, h.c, &discoveryv1.EndpointSlice{}, ns, "idle-1", "churn", "referenced")
	h.rebuiltWith("the referenced EndpointSlice's change", func(in rebuild.Input) bool {
		s := in.State.EndpointSlices[types.NamespacedName{Namespace: ns, Name: "idle-1"}]
		return s != nil && s.Labels["churn"] == "referenced"
	})
}

// Tests that a route whose status another writer changed gets ours back at the next rebuild,
// though neither the route's spec nor the parents we want for it changed: the status writer
// skips only a route it has seen unchanged since it last wrote it.
func TestRouteStatusChangedByAnotherWriterIsRestored(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, "")
	h.acceptedRoute(ns)
	h.statusSettled()

	var r gwapiv1.HTTPRoute
	h.get(&r, ns, "echo")
	for i := range r.Status.Parents {
		for j := range r.Status.Parents[i].Conditions {
			if c := &r.Status.Parents[i].Conditions[j]; c.Type == string(gwapiv1.RouteConditionAccepted) {
				c.Status, c.Reason = metav1.ConditionFalse, "Tampered"
			}
		}
	}
	if err := h.c.Status().Update(context.Background(), &r); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the route's status is changed", h.routeCondition(ns, "echo", "web", string(gwapiv1.RouteConditionAccepted), metav1.ConditionFalse, "Tampered"))
	h.rebuildSeeing("the tampered route", func(in rebuild.Input) bool {
		r := in.State.HTTPRoutes[types.NamespacedName{Namespace: ns, Name: "echo"}]
		if r == nil {
			return false
		}
		for _, p := range r.Status.Parents {
			if c := meta.FindStatusCondition(p.Conditions, string(gwapiv1.RouteConditionAccepted)); c != nil && c.Reason == "Tampered" {
				return true
			}
		}
		return false
	}, ns)
	eventually(t, "the route is accepted again", h.routeCondition(ns, "echo", "web", string(gwapiv1.RouteConditionAccepted), metav1.ConditionTrue, ""))
}

// acceptedRoute makes a GatewayClass of ours, a Gateway "web" of it, a backend "echo" and a
// route "echo" from the one to the other in ns, waits until the route is accepted, and returns
// the class's name.
func (h *gatewayAPI) acceptedRoute(ns string) string {
	h.t.Helper()
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	h.newBackend(ns, "echo", "10.1.2.3")
	h.create(newGateway(ns, "web", class))
	h.create(newHTTPRoute(ns, "echo", []gwapiv1.ParentReference{parentRef(ns, "web")}, ns, "echo"))
	eventually(h.t, "the route is accepted", h.routeCondition(ns, "echo", "web", string(gwapiv1.RouteConditionAccepted), metav1.ConditionTrue, ""))
	return class
}
