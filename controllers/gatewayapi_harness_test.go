package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/rebuild"
	"coxswain.dev/coxswain/internal/scopeauth"
	"coxswain.dev/coxswain/internal/status"
)

// gatewayScheme knows the Gateway API types besides those of the suite's scheme.
var gatewayScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(s), v1alpha1.AddToScheme(s), gwapiv1.Install(s)); err != nil {
		panic(err)
	}
	return s
}()

// rebuildRecord is one run of the pipeline as the reconciler saw it.
type rebuildRecord struct {
	in  rebuild.Input
	res rebuild.Result
	err error
}

// gatewayAPI is a running GatewayAPIReconciler with the pieces tests look at.
type gatewayAPI struct {
	t           *testing.T
	c           client.Client
	cache       *cache.Cache
	auth        *scopeauth.Authority
	debouncer   *rebuild.Debouncer
	leader      atomic.Bool
	revocations atomic.Int32
	// metrics holds the pipeline's metrics.
	metrics *prometheus.Registry

	pipeline *rebuild.Pipeline

	mu      sync.Mutex
	records []rebuildRecord
}

// startGatewayAPI runs the reconciler in its own manager until the test ends. namespace is the
// operator's, which holds the Services of shared pool Gateways (wellknown.InstallNamespace when
// empty).
func startGatewayAPI(t *testing.T, leader bool, namespace string) *gatewayAPI {
	t.Helper()
	return startGatewayAPIWith(t, leader, graph.Options{Namespace: namespace})
}

// startGatewayAPIWith is startGatewayAPI with the pipeline's graph options; opts.Namespace is the
// operator's.
func startGatewayAPIWith(t *testing.T, leader bool, opts graph.Options) *gatewayAPI {
	t.Helper()
	return startGatewayAPIWriter(t, leader, opts, nil)
}

// startGatewayAPIWriter is startGatewayAPIWith with edit, when not nil, applied to the status
// writer before the manager starts.
func startGatewayAPIWriter(t *testing.T, leader bool, opts graph.Options, edit func(*status.Writer)) *gatewayAPI {
	t.Helper()
	namespace := opts.Namespace
	h := &gatewayAPI{t: t, c: newGatewayClient(t), cache: cache.New(nil), auth: scopeauth.New(), metrics: prometheus.NewRegistry()}
	metrics, err := rebuild.NewMetrics(h.metrics)
	if err != nil {
		t.Fatal(err)
	}
	h.leader.Store(leader)
	h.auth.OnChange(func() { h.revocations.Add(1) })
	h.debouncer = rebuild.NewDebouncer(20*time.Millisecond, nil)
	runManager(t, ctrl.Options{Scheme: gatewayScheme, Cache: crcache.Options{ByObject: GatewayAPICacheOptions()}}, func(mgr ctrl.Manager) error {
		writer := &status.Writer{
			Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Namespace: namespace,
			Recorder: mgr.GetEventRecorder("coxswain"),
		}
		if edit != nil {
			edit(writer)
		}
		r := &GatewayAPIReconciler{
			Client: mgr.GetClient(),
			Cache:  mgr.GetCache(),
			Pipeline: &rebuild.Pipeline{
				Graph: opts,
				Cache: h.cache, Authority: h.auth, IsLeader: h.leader.Load, Metrics: metrics,
				Status: writer,
			},
			Debouncer:    h.debouncer,
			afterRebuild: h.record,
		}
		h.pipeline = r.Pipeline
		return r.SetupWithManager(mgr)
	})
	return h
}

func newGatewayClient(t *testing.T) client.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: gatewayScheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (h *gatewayAPI) record(in rebuild.Input, res rebuild.Result, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, rebuildRecord{in: in, res: res, err: err})
}

// rebuiltWith waits for a rebuild whose input satisfies saw and returns its record.
func (h *gatewayAPI) rebuiltWith(what string, saw func(rebuild.Input) bool) rebuildRecord {
	h.t.Helper()
	var found rebuildRecord
	eventually(h.t, "a rebuild that saw "+what, func() error {
		h.mu.Lock()
		defer h.mu.Unlock()
		i := slices.IndexFunc(h.records, func(r rebuildRecord) bool { return saw(r.in) })
		if i < 0 {
			return fmt.Errorf("none of %d rebuilds", len(h.records))
		}
		found = h.records[i]
		return nil
	})
	if found.err != nil {
		h.t.Fatalf("the rebuild that saw %s failed: %v", what, found.err)
	}
	return found
}

// rebuilt reports whether a rebuild so far had an input that satisfies saw.
func (h *gatewayAPI) rebuilt(saw func(rebuild.Input) bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.ContainsFunc(h.records, func(r rebuildRecord) bool { return saw(r.in) })
}

// rebuildSeeing changes a label of the Service "echo" of ns until a rebuild that saw the change
// also saw what saw looks for, which a watch whose predicate ignores it (a status change) does
// not start a rebuild for: the rebuild the Service change starts may read its cache before the
// informer of another kind caught up, as the informers of two kinds are not ordered.
func (h *gatewayAPI) rebuildSeeing(what string, saw func(rebuild.Input) bool, ns string) {
	h.t.Helper()
	for i := 1; i <= 10; i++ {
		label := strconv.Itoa(i)
		touch(h.t, h.c, &corev1.Service{}, ns, "echo", "touched", label)
		labelled := serviceLabelled(ns, "echo", "touched", label)
		h.rebuiltWith("the relabelled Service", labelled)
		if h.rebuilt(func(in rebuild.Input) bool { return labelled(in) && saw(in) }) {
			return
		}
	}
	h.t.Fatalf("none of ten rebuilds saw %s", what)
}

// keys returns the resource keys of a scope's snapshot and its version.
func (h *gatewayAPI) keys(scope cache.Scope) ([]string, string) {
	snap := h.cache.Get(scope)
	if snap == nil {
		return nil, ""
	}
	var out []string
	for _, r := range snap.Resources() {
		out = append(out, r.GetKey())
	}
	return out, snap.Version()
}

// create creates obj and fails the test on error.
func (h *gatewayAPI) create(obj client.Object) {
	h.t.Helper()
	if err := h.c.Create(context.Background(), obj); err != nil {
		h.t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

func (h *gatewayAPI) get(obj client.Object, namespace, name string) {
	h.t.Helper()
	if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: namespace, Name: name}, obj); err != nil {
		h.t.Fatalf("get %T %s/%s: %v", obj, namespace, name, err)
	}
}

// newGatewayClass creates a GatewayClass named after the test namespace and deletes it when the
// test ends, so that later tests do not serve this test's Gateways.
func (h *gatewayAPI) newGatewayClass(ns string, controller gwapiv1.GatewayController) string {
	h.t.Helper()
	gc := &gwapiv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: "class-" + ns + "-" + shortName(controller)},
		Spec:       gwapiv1.GatewayClassSpec{ControllerName: controller},
	}
	h.create(gc)
	h.t.Cleanup(func() { _ = h.c.Delete(context.Background(), gc) })
	return gc.Name
}

func shortName(controller gwapiv1.GatewayController) string {
	if controller == wellknown.GatewayControllerName {
		return "ours"
	}
	return "theirs"
}

func newGateway(ns, name, class string) *gwapiv1.Gateway {
	return &gwapiv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gwapiv1.GatewaySpec{
			GatewayClassName: gwapiv1.ObjectName(class),
			Listeners:        []gwapiv1.Listener{{Name: "http", Port: 80, Protocol: gwapiv1.HTTPProtocolType}},
		},
	}
}

func newHTTPRoute(ns, name string, parents []gwapiv1.ParentReference, backendNS, backend string) *gwapiv1.HTTPRoute {
	ref := gwapiv1.HTTPBackendRef{BackendRef: gwapiv1.BackendRef{BackendObjectReference: gwapiv1.BackendObjectReference{
		Name: gwapiv1.ObjectName(backend), Port: ptr.To(gwapiv1.PortNumber(80)),
	}}}
	if backendNS != ns {
		ref.Namespace = ptr.To(gwapiv1.Namespace(backendNS))
	}
	return &gwapiv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gwapiv1.HTTPRouteSpec{
			CommonRouteSpec: gwapiv1.CommonRouteSpec{ParentRefs: parents},
			Rules:           []gwapiv1.HTTPRouteRule{{BackendRefs: []gwapiv1.HTTPBackendRef{ref}}},
		},
	}
}

func parentRef(ns, gateway string) gwapiv1.ParentReference {
	return gwapiv1.ParentReference{Namespace: ptr.To(gwapiv1.Namespace(ns)), Name: gwapiv1.ObjectName(gateway)}
}

// newBackend creates a Service with a selector and one port 80 ("http"), and an EndpointSlice
// with one ready endpoint at address:8080 labelled as the EndpointSlice controller's (envtest
// runs no controller that would write it).
func (h *gatewayAPI) newBackend(ns, name, address string) {
	h.t.Helper()
	h.create(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": name}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	})
	h.create(&discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-1", Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{address}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080))}},
	})
}

// wantCondition reports an error unless conds hold condType with status and, when given, reason.
func wantCondition(conds []metav1.Condition, condType string, status metav1.ConditionStatus, reason string) error {
	c := meta.FindStatusCondition(conds, condType)
	switch {
	case c == nil:
		return fmt.Errorf("no %s condition in %v", condType, conds)
	case c.Status != status || (reason != "" && c.Reason != reason):
		return fmt.Errorf("%s is %s/%s (%s), want %s/%s", condType, c.Status, c.Reason, c.Message, status, reason)
	}
	return nil
}

// ourParent returns the route's parent status entry of our controller for the Gateway.
func ourParent(route *gwapiv1.HTTPRoute, gateway string) *gwapiv1.RouteParentStatus {
	for i, p := range route.Status.Parents {
		if p.ControllerName == wellknown.GatewayControllerName && string(p.ParentRef.Name) == gateway {
			return &route.Status.Parents[i]
		}
	}
	return nil
}

// routeCondition checks one condition of our parent entry for gateway on a stored route.
func (h *gatewayAPI) routeCondition(ns, name, gateway, condType string, status metav1.ConditionStatus, reason string) func() error {
	return func() error {
		var route gwapiv1.HTTPRoute
		if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &route); err != nil {
			return err
		}
		p := ourParent(&route, gateway)
		if p == nil {
			return fmt.Errorf("no parent entry of ours for %s in %+v", gateway, route.Status.Parents)
		}
		return wantCondition(p.Conditions, condType, status, reason)
	}
}

// quiet waits until no rebuild has happened for a while (ten debounce intervals) and returns
// how many there were.
func (h *gatewayAPI) quiet() int {
	h.t.Helper()
	const settle = 200 * time.Millisecond
	n := -1
	for range 100 {
		h.mu.Lock()
		cur := len(h.records)
		h.mu.Unlock()
		if cur == n {
			return n
		}
		n = cur
		time.Sleep(settle)
	}
	h.t.Fatal("rebuilds never stopped")
	return 0
}

// statusSettled waits until the background status writes have caught up with the latest
// rebuild and returns how many objects they have patched so far.
func (h *gatewayAPI) statusSettled() int {
	h.t.Helper()
	var written int
	eventually(h.t, "status writes settle", func() error {
		var ok bool
		if ok, written = h.pipeline.StatusSettled(); !ok {
			return errors.New("status writes pending")
		}
		return nil
	})
	return written
}
