package controllers

import (
	"context"
	"errors"
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/graph/conditions"
	"coxswain.dev/coxswain/internal/provision"
)

var testDefaults = provision.Defaults{
	Image:                    "coxswain.dev/coxswain-proxy:test",
	Replicas:                 1,
	DiscoveryEndpoint:        "coxswain-discovery.coxswain-system.svc:50051",
	BootstrapEndpoint:        "coxswain-discovery.coxswain-system.svc:50052",
	ControllerNamespace:      "coxswain-system",
	ControllerServiceAccount: "coxswain-controller",
}

// startProvision runs a ProvisionReconciler in its own manager until the test ends and returns
// it, so a test can also call Reconcile itself. namespace stands for the operator's: the Services
// of shared pool Gateways go there.
func startProvision(t *testing.T, namespace string) *ProvisionReconciler {
	t.Helper()
	return startProvisionWith(t, graph.Options{Namespace: namespace}, testDefaults)
}

// startProvisionWith is startProvision with the graph options (opts.Namespace is the operator's)
// and the proxy defaults.
func startProvisionWith(t *testing.T, opts graph.Options, defaults provision.Defaults) *ProvisionReconciler {
	t.Helper()
	metrics, err := NewProvisionMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	byObject := ProvisionCacheOptions()
	for k, v := range GatewayAPICacheOptions() {
		byObject[k] = v
	}
	var r *ProvisionReconciler
	mgr := runManager(t, ctrl.Options{Scheme: gatewayScheme, Cache: crcache.Options{ByObject: byObject}}, func(mgr ctrl.Manager) error {
		r = &ProvisionReconciler{
			Client:   mgr.GetClient(),
			Cache:    mgr.GetCache(),
			Reader:   mgr.GetAPIReader(),
			Graph:    opts,
			Defaults: func() provision.Defaults { return defaults },
			Metrics:  metrics,
			Recorder: mgr.GetEventRecorder("coxswain"),
		}
		return r.SetupWithManager(mgr)
	})
	if !mgr.GetCache().WaitForCacheSync(t.Context()) {
		t.Fatal("cache did not sync")
	}
	return r
}

// dedicatedGateway returns a Gateway of class naming parameters "params" in its own
// spec.infrastructure, with infrastructure labels and annotations.
func dedicatedGateway(ns, name, class string) *gwapiv1.Gateway {
	gw := newGateway(ns, name, class)
	gw.Spec.Listeners = append(gw.Spec.Listeners,
		gwapiv1.Listener{Name: "alt", Port: 8080, Protocol: gwapiv1.HTTPProtocolType},
		gwapiv1.Listener{Name: "sctp", Port: 5353, Protocol: "SCTP"})
	gw.Spec.Infrastructure = &gwapiv1.GatewayInfrastructure{
		Labels:      map[gwapiv1.LabelKey]gwapiv1.LabelValue{"infra-label": "yes"},
		Annotations: map[gwapiv1.AnnotationKey]gwapiv1.AnnotationValue{"infra-annotation": "yes"},
		ParametersRef: &gwapiv1.LocalParametersReference{
			Group: "gateway.coxswain.dev", Kind: "CoxswainGatewayParameters", Name: "params",
		},
	}
	return gw
}

func proxyObjects() []client.Object {
	return []client.Object{&corev1.ServiceAccount{}, &appsv1.Deployment{}, &corev1.Service{}}
}

// provisioned checks that the ServiceAccount, Deployment and Service named name exist, are
// controlled by gw and carry its labels and annotations.
func provisioned(c client.Client, gw *gwapiv1.Gateway, name string) error {
	for _, obj := range proxyObjects() {
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: gw.Namespace, Name: name}, obj); err != nil {
			return fmt.Errorf("%T: %w", obj, err)
		}
		ref := metav1.GetControllerOf(obj)
		if ref == nil || ref.UID != gw.UID || ref.Kind != "Gateway" {
			return fmt.Errorf("%T is controlled by %+v, want Gateway %s", obj, ref, gw.UID)
		}
		l, a := obj.GetLabels(), obj.GetAnnotations()
		if l[provision.GatewayNameLabel] != gw.Name || l["infra-label"] != "yes" || l[provision.ManagedByLabel] != provision.ManagedBy || a["infra-annotation"] != "yes" {
			return fmt.Errorf("%T labels %v annotations %v", obj, l, a)
		}
	}
	return nil
}

// Tests that a Gateway with parameters gets its ServiceAccount, Deployment and Service, owned by
// it, carrying spec.infrastructure metadata, serving only the accepted listener ports; that
// reconciling again writes nothing; that a hand edit is reverted; and that dropping the
// parameters removes the objects.
func TestDedicatedGatewayIsProvisioned(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, ns)
	r := startProvision(t, ns)
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	h.create(&v1alpha1.CoxswainGatewayParameters{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "params"}})
	gw := dedicatedGateway(ns, "edge", class)
	h.create(gw)
	name := wellknown.DedicatedProxyName("edge", class)

	eventually(t, "the proxy objects exist", func() error { return provisioned(h.c, gw, name) })

	var dep appsv1.Deployment
	h.get(&dep, ns, name)
	pod := dep.Spec.Template.Spec
	if pod.ServiceAccountName != name || pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("pod runs as %q, automount %v; want %q without automount", pod.ServiceAccountName, pod.AutomountServiceAccountToken, name)
	}
	if dep.Spec.Template.Labels["infra-label"] != "yes" || dep.Spec.Template.Annotations["infra-annotation"] != "yes" {
		t.Errorf("pod template metadata %v %v lacks the infrastructure labels and annotations", dep.Spec.Template.Labels, dep.Spec.Template.Annotations)
	}
	var svc corev1.Service
	h.get(&svc, ns, name)
	var ports []int32
	for _, p := range svc.Spec.Ports {
		ports = append(ports, p.Port)
	}
	if fmt.Sprint(ports) != "[80 8080]" || svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		t.Errorf("Service %s ports %v, want LoadBalancer [80 8080] (never the invalid SCTP listener)", svc.Spec.Type, ports)
	}

	// Reconciling again changes nothing.
	versions := resourceVersions(t, h.c, ns, name)
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "edge"}}); err != nil {
		t.Fatal(err)
	}
	if after := resourceVersions(t, h.c, ns, name); fmt.Sprint(after) != fmt.Sprint(versions) {
		t.Errorf("an idempotent reconcile wrote: resource versions %v then %v", versions, after)
	}

	// A hand edit is reverted. A merge patch, not an update: the Deployment controller writes
	// the object's status meanwhile, and an update would race it on the resource version.
	orig := dep.DeepCopy()
	dep.Spec.Replicas = ptr.To[int32](7)
	if err := h.c.Patch(context.Background(), &dep, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the hand edit is reverted", func() error {
		var cur appsv1.Deployment
		h.get(&cur, ns, name)
		if *cur.Spec.Replicas != testDefaults.Replicas {
			return fmt.Errorf("replicas %d", *cur.Spec.Replicas)
		}
		return nil
	})

	// Without parameters the Gateway moves to the shared pool and its proxy goes away.
	var cur gwapiv1.Gateway
	h.get(&cur, ns, "edge")
	cur.Spec.Infrastructure.ParametersRef = nil
	if err := h.c.Update(context.Background(), &cur); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the proxy objects are deleted", func() error {
		for _, obj := range proxyObjects() {
			err := h.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, obj)
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T still there: %w", obj, err)
			}
		}
		return nil
	})
}

// resourceVersions returns what changes when the objects are written: the resource version,
// or for an object with a generation (the Deployment, whose status the Deployment controller
// writes meanwhile) the generation, which only a spec write moves.
func resourceVersions(t *testing.T, c client.Client, ns, name string) []string {
	t.Helper()
	var out []string
	for _, obj := range proxyObjects() {
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, obj); err != nil {
			t.Fatal(err)
		}
		if g := obj.GetGeneration(); g != 0 {
			out = append(out, fmt.Sprintf("generation %d", g))
			continue
		}
		out = append(out, obj.GetResourceVersion())
	}
	return out
}

// Tests that Programmed waits for the proxy Service's load balancer address, then for a ready
// proxy replica (a Pod reported ready, through the real ReplicaSet and Deployment controllers),
// and that the address reported is the load balancer's, never the cluster IP.
func TestDedicatedGatewayIsProgrammedOnceItHasAnAddressAndAReadyProxy(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, ns)
	startProvision(t, ns)
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	h.create(&v1alpha1.CoxswainGatewayParameters{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "params"}})
	gw := dedicatedGateway(ns, "edge", class)
	h.create(gw)
	name := wellknown.DedicatedProxyName("edge", class)
	programmed := string(gwapiv1.GatewayConditionProgrammed)

	eventually(t, "Programmed is AddressNotAssigned", gatewayStatus(h, ns, "edge", programmed, metav1.ConditionFalse, string(gwapiv1.GatewayReasonAddressNotAssigned), ""))
	eventually(t, "a Warning event says the address is missing", warningEvent(h, ns, "edge", string(gwapiv1.GatewayReasonAddressNotAssigned)))

	// No cloud controller runs: play its part and give the Service a load balancer address.
	var svc corev1.Service
	eventually(t, "the proxy Service exists", func() error {
		return h.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &svc)
	})
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.9"}}
	if err := h.c.Status().Update(context.Background(), &svc); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Programmed is ProxyNotReady with the load balancer address", gatewayStatus(h, ns, "edge", programmed, metav1.ConditionFalse, conditions.ReasonProxyNotReady, "203.0.113.9"))
	eventually(t, "a Warning event says no proxy replica is ready", warningEvent(h, ns, "edge", conditions.ReasonProxyNotReady))

	// No kubelet runs: play its part and report the proxy Pod ready; the ReplicaSet and
	// Deployment controllers carry that up to the Deployment's status.
	var pod corev1.Pod
	eventually(t, "a proxy Pod exists", func() error {
		var pods corev1.PodList
		if err := h.c.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{provision.InstanceLabel: name}); err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			return errors.New("no Pod yet")
		}
		pod = pods.Items[0]
		return nil
	})
	now := metav1.Now()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
	if err := h.c.Status().Update(context.Background(), &pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Programmed is True", gatewayStatus(h, ns, "edge", programmed, metav1.ConditionTrue, string(gwapiv1.GatewayReasonProgrammed), "203.0.113.9"))
}

// gatewayStatus checks one condition of a Gateway and, when address is set, that it is the
// only address.
func gatewayStatus(h *gatewayAPI, ns, name, condType string, status metav1.ConditionStatus, reason, address string) func() error {
	return func() error {
		var gw gwapiv1.Gateway
		h.get(&gw, ns, name)
		if address != "" && (len(gw.Status.Addresses) != 1 || gw.Status.Addresses[0].Value != address) {
			return fmt.Errorf("addresses %+v, want only %s", gw.Status.Addresses, address)
		}
		if address == "" && len(gw.Status.Addresses) != 0 {
			return fmt.Errorf("addresses %+v, want none", gw.Status.Addresses)
		}
		return wantCondition(gw.Status.Conditions, condType, status, reason)
	}
}

// Tests that a Gateway whose proxy would run as the controller's ServiceAccount is refused with
// a condition and gets no objects, while its neighbour is provisioned.
func TestReservedProxyNameIsRefused(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, ns)
	startProvision(t, ns)
	gc := &gwapiv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: "controller"},
		Spec:       gwapiv1.GatewayClassSpec{ControllerName: wellknown.GatewayControllerName},
	}
	h.create(gc)
	t.Cleanup(func() { _ = h.c.Delete(context.Background(), gc) })
	h.create(&v1alpha1.CoxswainGatewayParameters{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "params"}})
	h.create(dedicatedGateway(ns, "coxswain", "controller")) // coxswain-controller
	neighbour := dedicatedGateway(ns, "neighbour", "controller")
	h.create(neighbour)

	eventually(t, "the reserved name is refused", gatewayStatus(h, ns, "coxswain", string(gwapiv1.GatewayConditionAccepted), metav1.ConditionFalse, conditions.ReasonProxyNameConflict, ""))
	eventually(t, "the neighbour is provisioned", func() error { return provisioned(h.c, neighbour, "neighbour-controller") })
	eventually(t, "a ProxyNameConflict event", warningEvent(h, ns, "coxswain", conditions.ReasonProxyNameConflict))
	for _, obj := range proxyObjects() {
		err := h.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: wellknown.ControllerServiceAccount}, obj)
		if !apierrors.IsNotFound(err) {
			t.Errorf("%T %s was provisioned for a refused Gateway: %v", obj, wellknown.ControllerServiceAccount, err)
		}
	}
}

// Tests that a ServiceAccount of the proxy's name that the Gateway does not own is never taken
// over: no object is provisioned and a Warning event says why.
func TestForeignObjectOfTheProxyNameIsLeftAlone(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, ns)
	startProvision(t, ns)
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	name := wellknown.DedicatedProxyName("edge", class)
	h.create(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	h.create(&v1alpha1.CoxswainGatewayParameters{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "params"}})
	h.create(dedicatedGateway(ns, "edge", class))

	eventually(t, "a ProxyNameTaken event", warningEvent(h, ns, "edge", ReasonProxyNameTaken))
	var sa corev1.ServiceAccount
	h.get(&sa, ns, name)
	if len(sa.OwnerReferences) != 0 || len(sa.Labels) != 0 {
		t.Errorf("the foreign ServiceAccount was taken over: owners %v labels %v", sa.OwnerReferences, sa.Labels)
	}
	for _, obj := range []client.Object{&appsv1.Deployment{}, &corev1.Service{}} {
		if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, obj); !apierrors.IsNotFound(err) {
			t.Errorf("%T was provisioned over a foreign ServiceAccount: %v", obj, err)
		}
	}
}

// Tests, with kube-controller-manager running, that the rendered pod template is one the API
// server admits (the Deployment's ReplicaSet creates a Pod running as the proxy's
// ServiceAccount), and that deleting the Gateway garbage-collects everything it owned.
func TestDeletingTheGatewayCollectsItsProxy(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, ns)
	startProvision(t, ns)
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	h.create(&v1alpha1.CoxswainGatewayParameters{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "params"}})
	gw := dedicatedGateway(ns, "edge", class)
	h.create(gw)
	name := wellknown.DedicatedProxyName("edge", class)
	eventually(t, "the proxy objects exist", func() error { return provisioned(h.c, gw, name) })

	eventually(t, "a proxy Pod exists", func() error {
		var pods corev1.PodList
		if err := h.c.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{provision.InstanceLabel: name}); err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			return errors.New("no Pod yet")
		}
		if sa := pods.Items[0].Spec.ServiceAccountName; sa != name {
			return fmt.Errorf("Pod runs as %q", sa)
		}
		return nil
	})

	if err := h.c.Delete(context.Background(), gw); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the garbage collector deletes the proxy objects", func() error {
		for _, obj := range proxyObjects() {
			err := h.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, obj)
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T still there: %w", obj, err)
			}
		}
		return nil
	})
}

// warningEvent checks for a Warning event with reason about the Gateway ns/name.
func warningEvent(h *gatewayAPI, ns, name, reason string) func() error {
	return func() error {
		var list eventsv1.EventList
		if err := h.c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Reason == reason && e.Regarding.Name == name && e.Type == corev1.EventTypeWarning {
				return nil
			}
		}
		return fmt.Errorf("no %s event among %d", reason, len(list.Items))
	}
}

// Tests that a dedicated proxy already serving is not torn down when its parameters go missing:
// the Gateway says InvalidParameters, a Warning event says why, and the objects stay.
func TestMissingParametersDoNotTearDownAServingProxy(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, ns)
	startProvision(t, ns)
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	params := &v1alpha1.CoxswainGatewayParameters{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "params"}}
	h.create(params)
	gw := dedicatedGateway(ns, "edge", class)
	h.create(gw)
	name := wellknown.DedicatedProxyName("edge", class)
	eventually(t, "the proxy objects exist", func() error { return provisioned(h.c, gw, name) })

	if err := h.c.Delete(context.Background(), params); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Gateway says InvalidParameters", gatewayStatus(h, ns, "edge", string(gwapiv1.GatewayConditionAccepted), metav1.ConditionFalse, string(gwapiv1.GatewayReasonInvalidParameters), ""))
	eventually(t, "an InvalidParameters event", warningEvent(h, ns, "edge", string(gwapiv1.GatewayReasonInvalidParameters)))
	if err := provisioned(h.c, gw, name); err != nil {
		t.Errorf("the serving proxy was torn down: %v", err)
	}
}

// Tests that two shared pool Gateways on port 80 get a Service each, in the operator's
// namespace, selecting the pool and mapping port 80 to distinct internal ports; that each
// Gateway reports its own Service's address; that a hand edit is reverted; and that deleting a
// Gateway deletes its Service while the other stays.
func TestSharedGatewaysGetTheirOwnServices(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, ns)
	startProvision(t, ns)
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	h.create(newGateway(ns, "blue", class))
	h.create(newGateway(ns, "green", class))
	blue, green := wellknown.SharedGatewayServiceName(ns, "blue"), wellknown.SharedGatewayServiceName(ns, "green")

	internal := map[string]int32{}
	eventually(t, "both Gateways have their Service", func() error {
		for _, name := range []string{blue, green} {
			var svc corev1.Service
			if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &svc); err != nil {
				return err
			}
			if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 80 {
				return fmt.Errorf("Service %s ports %+v, want only 80", name, svc.Spec.Ports)
			}
			if fmt.Sprint(svc.Spec.Selector) != fmt.Sprint(provision.SharedSelector()) || svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
				return fmt.Errorf("Service %s: %s selecting %v, want a LoadBalancer selecting the shared pool", name, svc.Spec.Type, svc.Spec.Selector)
			}
			internal[name] = svc.Spec.Ports[0].TargetPort.IntVal
		}
		return nil
	})
	for name, p := range internal {
		if p < wellknown.SharedPoolFirstPort || p > wellknown.SharedPoolLastPort {
			t.Errorf("Service %s maps port 80 to %d, outside the internal range", name, p)
		}
	}
	if internal[blue] == internal[green] {
		t.Fatalf("both Gateways' port 80 map to internal port %d", internal[blue])
	}

	// No cloud controller runs: give blue's Service a load balancer address. Only blue reports it.
	var svc corev1.Service
	h.get(&svc, ns, blue)
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.10"}}
	if err := h.c.Status().Update(context.Background(), &svc); err != nil {
		t.Fatal(err)
	}
	programmed := string(gwapiv1.GatewayConditionProgrammed)
	eventually(t, "blue reports its own address", gatewayStatus(h, ns, "blue", programmed, metav1.ConditionTrue, string(gwapiv1.GatewayReasonProgrammed), "203.0.113.10"))
	eventually(t, "green has no address yet", gatewayStatus(h, ns, "green", programmed, metav1.ConditionFalse, string(gwapiv1.GatewayReasonAddressNotAssigned), ""))

	// A hand edit of the selector is reverted.
	h.get(&svc, ns, blue)
	orig := svc.DeepCopy()
	svc.Spec.Selector = map[string]string{"app": "elsewhere"}
	if err := h.c.Patch(context.Background(), &svc, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the hand edit is reverted", func() error {
		var cur corev1.Service
		h.get(&cur, ns, blue)
		if fmt.Sprint(cur.Spec.Selector) != fmt.Sprint(provision.SharedSelector()) {
			return fmt.Errorf("selector %v", cur.Spec.Selector)
		}
		if cur.Spec.Ports[0].TargetPort.IntVal != internal[blue] {
			return fmt.Errorf("internal port moved from %d to %d", internal[blue], cur.Spec.Ports[0].TargetPort.IntVal)
		}
		return nil
	})

	// Deleting green deletes its Service; blue's stays.
	var gw gwapiv1.Gateway
	h.get(&gw, ns, "green")
	if err := h.c.Delete(context.Background(), &gw); err != nil {
		t.Fatal(err)
	}
	eventually(t, "green's Service is deleted", func() error {
		err := h.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: green}, &corev1.Service{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there: %w", err)
		}
		return nil
	})
	h.get(&svc, ns, blue)
}
