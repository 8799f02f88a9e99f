package status

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwapiv1ac "sigs.k8s.io/gateway-api/applyconfiguration/apis/v1"

	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/graph/conditions"
	"coxswain.dev/coxswain/internal/state"
)

// Writer writes the status of a graph to the objects it came from.
type Writer struct {
	// Client applies and patches status subresources.
	Client client.Client
	// Reader re-reads an object after a conflict; use one that bypasses the informer cache
	// (mgr.GetAPIReader()), or the retry may read the same stale object again.
	Reader client.Reader
	// Namespace is the operator's, where each shared pool Gateway has its own Service, whose
	// addresses it reports; wellknown.InstallNamespace when empty.
	Namespace string
	// SharedProxyDeployment is the Deployment of the shared proxy pool, whose readiness shared
	// pool Gateways wait for before they are Programmed. It is not checked while no such
	// Deployment exists.
	SharedProxyDeployment types.NamespacedName
	// Now is the clock of LastTransitionTime, time.Now when nil.
	Now func() time.Time
	// Recorder, when set, gets a Warning event on a Gateway whose Programmed condition turns
	// False because its proxy has no address or no ready replica (an image that never pulls, a
	// load balancer that never comes): the condition says it, the event makes it visible in
	// `kubectl get events` once, at the transition.
	Recorder events.EventRecorder
	// Applied, when set, judges from the proxies' acknowledgements whether they applied a
	// Gateway's current generation, which Programmed then waits for (see Programmed); nil
	// leaves Programmed to the proxy's address and readiness.
	Applied AppliedJudge

	// LegacyFieldManager is the field manager our status writes had before they were applied
	// (the process's name, from its user agent: ProcessFieldManager). What it still owns alone
	// in the status of a GatewayClass, Gateway or ListenerSet and we no longer apply is removed
	// before we apply (see prune), as our apply removes what it applied before. Empty removes
	// nothing.
	LegacyFieldManager string

	// last remembers, per object, the object and the status computed for it at its last write
	// that ended well (applied or patched, or found as wanted): the same object (the informer
	// cache keeps an unchanged object's pointer) with the same status wanted needs no copy or
	// comparison again. Any change of the object, ours included, is a new object.
	mu   sync.Mutex
	last map[lastKey]lastWrite
	done map[lastKey]lastWrite // the writes of the Write in progress that ended well
}

// lastKey names an object of a kind.
type lastKey struct {
	kind string
	key  types.NamespacedName
}

// lastWrite is an object's last write that ended well.
type lastWrite struct {
	src  client.Object
	want any
}

// Write writes the status of every GatewayClass, Gateway, HTTPRoute, GRPCRoute, TLSRoute, TCPRoute, UDPRoute, BackendTLSPolicy and
// ListenerSet of g whose stored status differs from the computed one, and removes our parent
// entries from the routes of cs that no longer reference our Gateways (and our ancestor entries
// from policies whose targets our Gateways no longer use). The status of a GatewayClass, Gateway
// or ListenerSet is applied server-side as FieldManager, which keeps the conditions and
// listeners of other writers; route parents and policy ancestors are atomic lists, patched whole
// with the entries of other controllers kept, guarded by the resourceVersion. It returns how
// many objects it wrote. The objects of cs are never modified.
func (w *Writer) Write(ctx context.Context, cs *state.ClusterState, g *graph.Graph) (int, error) {
	now := w.now()
	st := g.Status()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = map[lastKey]lastWrite{}
	t := &tally{}
	count := t.count
	for _, want := range st.GatewayClasses {
		count(w.writeGatewayClass(ctx, cs.GatewayClasses[types.NamespacedName{Name: want.Name}], want.Status, now))
	}
	services := w.proxyServices(g)
	w.writeGateways(ctx, cs, st, services, now, count)
	c := g.ControllerName
	writeRoutes(ctx, w, "HTTPRoute", cs.HTTPRoutes, st.HTTPRoutes, c, now, count, func(r *gwapiv1.HTTPRoute) *[]gwapiv1.RouteParentStatus { return &r.Status.Parents })
	writeRoutes(ctx, w, "GRPCRoute", cs.GRPCRoutes, st.GRPCRoutes, c, now, count, func(r *gwapiv1.GRPCRoute) *[]gwapiv1.RouteParentStatus { return &r.Status.Parents })
	writeRoutes(ctx, w, "TLSRoute", cs.TLSRoutes, st.TLSRoutes, c, now, count, func(r *gwapiv1.TLSRoute) *[]gwapiv1.RouteParentStatus { return &r.Status.Parents })
	writeRoutes(ctx, w, "TCPRoute", cs.TCPRoutes, st.TCPRoutes, c, now, count, func(r *gwapiv1.TCPRoute) *[]gwapiv1.RouteParentStatus { return &r.Status.Parents })
	writeRoutes(ctx, w, "UDPRoute", cs.UDPRoutes, st.UDPRoutes, c, now, count, func(r *gwapiv1.UDPRoute) *[]gwapiv1.RouteParentStatus { return &r.Status.Parents })
	for _, want := range st.BackendTLSPolicies {
		key := types.NamespacedName{Namespace: want.Namespace, Name: want.Name}
		count(w.writeBackendTLSPolicy(ctx, cs.BackendTLSPolicies[key], g.ControllerName, want.Ancestors, now))
	}
	w.writeListenerSets(ctx, cs, st, services, now, count)
	w.last, w.done = w.done, nil
	return t.written, errors.Join(t.errs...)
}

// WriteApplied writes again what the proxies' answers in scopes decide: the status of the
// Gateways those scopes serve (Programmed waits for their acknowledgements) and of the
// ListenerSets attached to them, judged anew, and nothing else of g. It returns how many objects
// it wrote.
func (w *Writer) WriteApplied(ctx context.Context, cs *state.ClusterState, g *graph.Graph, scopes []cache.Scope) (int, error) {
	now := w.now()
	services := w.proxyServices(g)
	st := g.GatewaysStatus(func(gw *graph.Gateway) bool {
		return slices.Contains(scopes, scopeOf(gw.Source, services[gw.Key()]))
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = map[lastKey]lastWrite{}
	t := &tally{}
	count := t.count
	w.writeGateways(ctx, cs, st, services, now, count)
	w.writeListenerSets(ctx, cs, st, services, now, count)
	if w.last == nil {
		w.last = map[lastKey]lastWrite{}
	}
	maps.Copy(w.last, w.done)
	w.done = nil
	return t.written, errors.Join(t.errs...)
}

// now is the time of the status written now.
func (w *Writer) now() metav1.Time {
	if w.Now != nil {
		return metav1.NewTime(w.Now())
	}
	return metav1.NewTime(time.Now())
}

// tally counts the objects a pass wrote and gathers its errors.
type tally struct {
	written int
	errs    []error
}

func (t *tally) count(wrote bool, err error) {
	if wrote {
		t.written++
	}
	t.errs = append(t.errs, err)
}

func (w *Writer) writeGateways(ctx context.Context, cs *state.ClusterState, st graph.Status, services map[types.NamespacedName]gatewayProxy, now metav1.Time, count func(bool, error)) {
	for _, want := range st.Gateways {
		key := types.NamespacedName{Namespace: want.Namespace, Name: want.Name}
		count(w.writeGateway(ctx, cs, cs.Gateways[key], want.Status, services[key], now))
	}
}

// writeListenerSets writes the ListenerSets of st, each judged with its parent among st's
// Gateways.
func (w *Writer) writeListenerSets(ctx context.Context, cs *state.ClusterState, st graph.Status, services map[types.NamespacedName]gatewayProxy, now metav1.Time, count func(bool, error)) {
	for _, want := range st.ListenerSets {
		key := types.NamespacedName{Namespace: want.Namespace, Name: want.Name}
		ls := w.withParent(cs, want, st.Gateways, services[want.Gateway])
		count(w.writeListenerSet(ctx, cs.ListenerSets[key], ls, now))
	}
}

// unchanged says whether src, with want computed for it, is the object of its kind's last write
// that ended well with the same want, and if so remembers that write for the next Write.
func (w *Writer) unchanged(kind string, src client.Object, want any) bool {
	k := lastKey{kind: kind, key: client.ObjectKeyFromObject(src)}
	if last, ok := w.last[k]; ok && last.src == src && equality.Semantic.DeepEqual(last.want, want) {
		w.done[k] = last
		return true
	}
	return false
}

// remember records the write of want to src as ended well.
func (w *Writer) remember(kind string, src client.Object, want any) {
	w.done[lastKey{kind: kind, key: client.ObjectKeyFromObject(src)}] = lastWrite{src: src, want: want}
}

func (w *Writer) writeBackendTLSPolicy(ctx context.Context, src *gwapiv1.BackendTLSPolicy, controller gwapiv1.GatewayController, want []gwapiv1.PolicyAncestorStatus, now metav1.Time) (bool, error) {
	return patch(ctx, w, "BackendTLSPolicy", src, want, func(obj *gwapiv1.BackendTLSPolicy) {
		obj.Status.Ancestors = PolicyAncestors(obj.Status.Ancestors, controller, want, now)
	})
}

// writeRoutes writes the parent statuses we own of every route of one kind in routes: want
// holds the graph's, and a route it does not hold loses our entries. parents returns the
// route's status parents, an atomic list patched whole with other controllers' entries kept.
func writeRoutes[T any, P object[T]](ctx context.Context, w *Writer, kind string, routes map[types.NamespacedName]P,
	want []graph.HTTPRouteStatus, controller gwapiv1.GatewayController, now metav1.Time,
	count func(bool, error), parents func(P) *[]gwapiv1.RouteParentStatus,
) {
	ours := make(map[types.NamespacedName][]gwapiv1.RouteParentStatus, len(want))
	for _, st := range want {
		ours[types.NamespacedName{Namespace: st.Namespace, Name: st.Name}] = st.Parents
	}
	for _, route := range routes {
		want := ours[state.Key(route)]
		count(patch(ctx, w, kind, route, want, func(obj P) {
			p := parents(obj)
			*p = RouteParents(*p, controller, want, now)
		}))
	}
}

func (w *Writer) writeListenerSet(ctx context.Context, src *gwapiv1.ListenerSet, want gwapiv1.ListenerSetStatus, now metav1.Time) (bool, error) {
	if src == nil || w.unchanged("ListenerSet", src, want) {
		return false, nil
	}
	ours := ListenerSet(src.Status, want, now)
	st := listenerSetStatusApply(ours)
	return apply(ctx, w, "ListenerSet", src, want, gwapiv1ac.ListenerSet(src.Name, src.Namespace).WithStatus(st), st, &ours,
		func() (any, error) {
			ac, err := gwapiv1ac.ExtractListenerSetStatus(src, FieldManager)
			if err != nil {
				return nil, err
			}
			return ac.Status, nil
		})
}

func (w *Writer) writeGatewayClass(ctx context.Context, src *gwapiv1.GatewayClass, want gwapiv1.GatewayClassStatus, now metav1.Time) (bool, error) {
	if src == nil || w.unchanged("GatewayClass", src, want) {
		return false, nil
	}
	ours := GatewayClass(src.Status, want, now)
	st := gatewayClassStatusApply(ours)
	return apply(ctx, w, "GatewayClass", src, want, gwapiv1ac.GatewayClass(src.Name).WithStatus(st), st, &ours,
		func() (any, error) {
			ac, err := gwapiv1ac.ExtractGatewayClassStatus(src, FieldManager)
			if err != nil {
				return nil, err
			}
			return ac.Status, nil
		})
}

// gatewayWant is what a Gateway's status is computed from: the graph's status with Programmed
// judged by the proxy, and the addresses.
type gatewayWant struct {
	Status    gwapiv1.GatewayStatus // exported for equality.Semantic, which refuses unexported fields
	Addresses []gwapiv1.GatewayStatusAddress
}

func (w *Writer) writeGateway(ctx context.Context, cs *state.ClusterState, src *gwapiv1.Gateway, want gwapiv1.GatewayStatus, proxy gatewayProxy, now metav1.Time) (bool, error) {
	if src == nil {
		return false, nil
	}
	p := w.proxyOf(cs, src, proxy)
	want = *want.DeepCopy()
	want.Conditions = Programmed(want.Conditions, p)
	if w.unchanged("Gateway", src, gatewayWant{want, p.Addresses}) {
		return false, nil
	}
	warn := proxyWarning(src.Status.Conditions, want.Conditions, p.Applied.State == AppliedRefused)
	ours := Gateway(src.Status, want, p.Addresses, now)
	st := gatewayStatusApply(ours)
	wrote, err := apply(ctx, w, "Gateway", src, gatewayWant{want, p.Addresses}, gwapiv1ac.Gateway(src.Name, src.Namespace).WithStatus(st), st, &ours,
		func() (any, error) {
			ac, err := gwapiv1ac.ExtractGatewayStatus(src, FieldManager)
			if err != nil {
				return nil, err
			}
			return ac.Status, nil
		})
	if wrote && err == nil && warn != nil && w.Recorder != nil {
		w.Recorder.Eventf(src, nil, corev1.EventTypeWarning, warn.Reason, "Program", "%s", warn.Message)
	}
	return wrote, err
}

// proxyWarning returns the Programmed condition of want when it turns False, from cur, for a
// reason of the proxy (AddressNotAssigned, AddressNotUsable, ProxyNotReady, or Invalid when
// refused says a proxy NACKed the Gateway's configuration); nil otherwise.
func proxyWarning(cur, want []metav1.Condition, refused bool) *metav1.Condition {
	next := meta.FindStatusCondition(want, string(gwapiv1.GatewayConditionProgrammed))
	if next == nil || next.Status != metav1.ConditionFalse ||
		(next.Reason != string(gwapiv1.GatewayReasonAddressNotAssigned) &&
			next.Reason != string(gwapiv1.GatewayReasonAddressNotUsable) && next.Reason != conditions.ReasonProxyNotReady &&
			(!refused || next.Reason != string(gwapiv1.GatewayReasonInvalid))) {
		return nil
	}
	if prev := meta.FindStatusCondition(cur, next.Type); prev != nil && prev.Status == next.Status && prev.Reason == next.Reason {
		return nil
	}
	return next
}

// gatewayProxy is what serves a Gateway: the Service that gives it its address (zero when it
// has none) and whether that is a Service of the shared pool.
type gatewayProxy struct {
	service types.NamespacedName
	shared  bool
}

// proxyServices maps every Gateway to its proxy Service: a dedicated Gateway's own, or a shared
// pool Gateway's in the operator's namespace.
func (w *Writer) proxyServices(g *graph.Graph) map[types.NamespacedName]gatewayProxy {
	namespace := w.Namespace
	if namespace == "" {
		namespace = wellknown.InstallNamespace
	}
	out := map[types.NamespacedName]gatewayProxy{}
	for _, gw := range g.Gateways {
		switch {
		case gw.Dedicated:
			out[gw.Key()] = gatewayProxy{service: types.NamespacedName{Namespace: gw.Source.Namespace, Name: gw.ProxyName}}
		case gw.SharedService != "":
			out[gw.Key()] = gatewayProxy{service: types.NamespacedName{Namespace: namespace, Name: gw.SharedService}, shared: true}
		default:
			out[gw.Key()] = gatewayProxy{shared: true}
		}
	}
	return out
}

// ownService returns the proxy Service of the Gateway src, nil when there is none or the
// Service of that name is not the Gateway's: a shared pool Service must record src in its
// annotation, a dedicated proxy's Service must be controlled by src. A Gateway never reports the
// address of a Service someone else made under its name.
func ownService(cs *state.ClusterState, src *gwapiv1.Gateway, proxy gatewayProxy) *corev1.Service {
	svc := cs.Services[proxy.service]
	switch {
	case svc == nil:
		return nil
	case proxy.shared && svc.Annotations[graph.SharedServiceGatewayAnnotation] != state.Key(src).String():
		return nil
	case !proxy.shared && !controlledBy(svc, src):
		return nil
	}
	return svc
}

// ownDeployment returns the Deployment key whose readiness the Gateway src waits for: the
// shared pool's, or its dedicated proxy's when src controls it; nil otherwise.
func ownDeployment(cs *state.ClusterState, src *gwapiv1.Gateway, proxy gatewayProxy, key types.NamespacedName) *appsv1.Deployment {
	d := cs.Deployments[key]
	if d == nil || proxy.shared || controlledBy(d, src) {
		return d
	}
	return nil
}

func controlledBy(obj metav1.Object, gw *gwapiv1.Gateway) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.UID == gw.UID
}

// apply server-side applies ac, the status computed for src (as want, before its transition
// times were stamped; as ours, the typed status in ac), as FieldManager with force: the fields it
// holds are ours, whoever last set them. It applies nothing when stored, the status FieldManager
// owns in src, is already status (the status part of ac), unless prune removed what our earlier,
// patching self left. An object deleted meanwhile needs no status.
func apply(ctx context.Context, w *Writer, kind string, src client.Object, want any, ac runtime.ApplyConfiguration, status, ours any, stored func() (any, error)) (bool, error) {
	key := client.ObjectKeyFromObject(src)
	pruned, err := w.prune(ctx, src, ours)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		// A conflict: the object changed, and its next version gets the next try.
		return false, fmt.Errorf("remove the stale %s %s status of %s: %w", kind, key, w.LegacyFieldManager, err)
	}
	if !pruned {
		// An error extracting means the stored status cannot be compared: apply it anyway.
		if cur, err := stored(); err == nil && equality.Semantic.DeepEqual(cur, status) {
			w.remember(kind, src, want)
			return false, nil
		}
	}
	err = w.Client.Status().Apply(ctx, ac, client.FieldOwner(FieldManager), client.ForceOwnership)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("apply %s %s status: %w", kind, key, err)
	}
	w.remember(kind, src, want)
	log.FromContext(ctx).V(1).Info("Applied status", "kind", kind, "object", key)
	return true, nil
}

// object is a pointer to a Kubernetes API type with a status subresource.
type object[T any] interface {
	*T
	client.Object
	DeepCopyInto(out *T)
}

// patch applies mutate to a copy of src, computed from want, and patches the status when it
// changed, as FieldManager with the resourceVersion as a precondition: for the atomic lists of
// route parents and policy ancestors, which another controller may rewrite whole between our
// read and our write. On a conflict it re-reads the object and tries again; an object deleted
// meanwhile needs no status.
func patch[T any, P object[T]](ctx context.Context, w *Writer, kind string, src P, want any, mutate func(P)) (bool, error) {
	if src == nil || w.unchanged(kind, src, want) {
		return false, nil
	}
	obj := P(new(T))
	src.DeepCopyInto(obj)
	key := client.ObjectKeyFromObject(src)
	wrote := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		orig := P(new(T))
		obj.DeepCopyInto(orig)
		mutate(obj)
		if equality.Semantic.DeepEqual(orig, obj) {
			return nil
		}
		err := w.Client.Status().Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldManager))
		if apierrors.IsConflict(err) {
			obj = P(new(T))
			if getErr := w.Reader.Get(ctx, key, obj); getErr != nil {
				return getErr
			}
			return err
		}
		wrote = err == nil
		return err
	})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("write %s %s status: %w", kind, key, err)
	}
	w.remember(kind, src, want)
	if wrote {
		log.FromContext(ctx).V(1).Info("Wrote status", "kind", kind, "object", key)
	}
	return wrote, nil
}
