package status

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/graph/conditions"
	"coxswain.dev/coxswain/internal/state"
)

// Writer writes the status of a graph to the objects it came from.
type Writer struct {
	// Client patches status subresources.
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

	// routes remembers, per HTTPRoute, the object and the parents wanted at its last write
	// that ended well (patched, or found as wanted): the same object (the informer cache keeps
	// an unchanged object's pointer) with the same parents wanted needs no copy or comparison
	// again. Any change of the route, ours included, is a new object.
	mu     sync.Mutex
	routes map[types.NamespacedName]routeWrite
}

// routeWrite is an HTTPRoute's last write that ended well.
type routeWrite struct {
	src  *gwapiv1.HTTPRoute
	want []gwapiv1.RouteParentStatus
}

// Write patches the status of every GatewayClass, Gateway, HTTPRoute and BackendTLSPolicy of g
// whose stored status differs from the computed one, and removes our parent entries from the
// routes of cs that no longer reference our Gateways (and our ancestor entries from policies
// whose targets our Gateways no longer use). It returns how many objects it patched. The objects of cs are
// never modified.
func (w *Writer) Write(ctx context.Context, cs *state.ClusterState, g *graph.Graph) (int, error) {
	now := metav1.NewTime(time.Now())
	if w.Now != nil {
		now = metav1.NewTime(w.Now())
	}
	st := g.Status()
	var errs []error
	written := 0
	count := func(wrote bool, err error) {
		if wrote {
			written++
		}
		errs = append(errs, err)
	}
	for _, want := range st.GatewayClasses {
		count(w.writeGatewayClass(ctx, cs.GatewayClasses[types.NamespacedName{Name: want.Name}], want.Status, now))
	}
	services := w.proxyServices(g)
	for _, want := range st.Gateways {
		key := types.NamespacedName{Namespace: want.Namespace, Name: want.Name}
		count(w.writeGateway(ctx, cs, cs.Gateways[key], want.Status, services[key], now))
	}
	ours := map[types.NamespacedName][]gwapiv1.RouteParentStatus{}
	for _, want := range st.HTTPRoutes {
		ours[types.NamespacedName{Namespace: want.Namespace, Name: want.Name}] = want.Parents
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	done := make(map[types.NamespacedName]routeWrite, len(cs.HTTPRoutes))
	for key, route := range cs.HTTPRoutes {
		want := ours[key]
		if last, ok := w.routes[key]; ok && last.src == route && equality.Semantic.DeepEqual(last.want, want) {
			done[key] = last
			continue
		}
		wrote, err := w.writeHTTPRoute(ctx, route, g.ControllerName, want, now)
		if err == nil {
			done[key] = routeWrite{src: route, want: want}
		}
		count(wrote, err)
	}
	w.routes = done
	for _, want := range st.BackendTLSPolicies {
		key := types.NamespacedName{Namespace: want.Namespace, Name: want.Name}
		count(w.writeBackendTLSPolicy(ctx, cs.BackendTLSPolicies[key], g.ControllerName, want.Ancestors, now))
	}
	for _, want := range st.ListenerSets {
		key := types.NamespacedName{Namespace: want.Namespace, Name: want.Name}
		ls := w.withParent(cs, want, st.Gateways, services[want.Gateway])
		count(w.writeListenerSet(ctx, cs.ListenerSets[key], ls, now))
	}
	return written, errors.Join(errs...)
}

func (w *Writer) writeBackendTLSPolicy(ctx context.Context, src *gwapiv1.BackendTLSPolicy, controller gwapiv1.GatewayController, want []gwapiv1.PolicyAncestorStatus, now metav1.Time) (bool, error) {
	return write(ctx, w, "BackendTLSPolicy", src, func(obj *gwapiv1.BackendTLSPolicy) {
		obj.Status.Ancestors = PolicyAncestors(obj.Status.Ancestors, controller, want, now)
	})
}

func (w *Writer) writeListenerSet(ctx context.Context, src *gwapiv1.ListenerSet, want gwapiv1.ListenerSetStatus, now metav1.Time) (bool, error) {
	return write(ctx, w, "ListenerSet", src, func(obj *gwapiv1.ListenerSet) {
		obj.Status = ListenerSet(obj.Status, want, now)
	})
}

func (w *Writer) writeGatewayClass(ctx context.Context, src *gwapiv1.GatewayClass, want gwapiv1.GatewayClassStatus, now metav1.Time) (bool, error) {
	return write(ctx, w, "GatewayClass", src, func(obj *gwapiv1.GatewayClass) {
		obj.Status = GatewayClass(obj.Status, want, now)
	})
}

func (w *Writer) writeGateway(ctx context.Context, cs *state.ClusterState, src *gwapiv1.Gateway, want gwapiv1.GatewayStatus, proxy gatewayProxy, now metav1.Time) (bool, error) {
	deployment, checkReady := proxy.service, true
	if proxy.shared {
		// The shared pool is installed, not provisioned: when it does not run as a Deployment
		// (a local run with proxies as processes), its readiness is not known here.
		deployment = w.SharedProxyDeployment
		_, checkReady = cs.Deployments[deployment]
	}
	var warn *metav1.Condition
	wrote, err := write(ctx, w, "Gateway", src, func(obj *gwapiv1.Gateway) {
		addresses := obj.Status.Addresses
		if proxy.service != (types.NamespacedName{}) {
			addresses = Addresses(ownService(cs, src, proxy))
		}
		want := *want.DeepCopy()
		want.Conditions = Programmed(want.Conditions, Proxy{
			Addresses:  addresses,
			Requested:  graph.RequestedAddresses(src),
			CheckReady: checkReady,
			Deployment: ownDeployment(cs, src, proxy, deployment),
		})
		warn = proxyWarning(obj.Status.Conditions, want.Conditions)
		obj.Status = Gateway(obj.Status, want, addresses, now)
	})
	if wrote && err == nil && warn != nil && w.Recorder != nil {
		w.Recorder.Eventf(src, nil, corev1.EventTypeWarning, warn.Reason, "Program", "%s", warn.Message)
	}
	return wrote, err
}

// proxyWarning returns the Programmed condition of want when it turns False, from cur, for a
// reason of the proxy (AddressNotAssigned, AddressNotUsable, ProxyNotReady); nil otherwise.
func proxyWarning(cur, want []metav1.Condition) *metav1.Condition {
	next := meta.FindStatusCondition(want, string(gwapiv1.GatewayConditionProgrammed))
	if next == nil || next.Status != metav1.ConditionFalse ||
		(next.Reason != string(gwapiv1.GatewayReasonAddressNotAssigned) &&
			next.Reason != string(gwapiv1.GatewayReasonAddressNotUsable) && next.Reason != conditions.ReasonProxyNotReady) {
		return nil
	}
	if prev := meta.FindStatusCondition(cur, next.Type); prev != nil && prev.Status == next.Status && prev.Reason == next.Reason {
		return nil
	}
	return next
}

func (w *Writer) writeHTTPRoute(ctx context.Context, src *gwapiv1.HTTPRoute, controller gwapiv1.GatewayController, want []gwapiv1.RouteParentStatus, now metav1.Time) (bool, error) {
	return write(ctx, w, "HTTPRoute", src, func(obj *gwapiv1.HTTPRoute) {
		obj.Status.Parents = RouteParents(obj.Status.Parents, controller, want, now)
	})
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

// object is a pointer to a Kubernetes API type with a status subresource.
type object[T any] interface {
	*T
	client.Object
	DeepCopyInto(out *T)
}

// write applies mutate to a copy of src and patches the status when it changed, with the
// resourceVersion as a precondition. On a conflict it re-reads the object and tries again; an
// object deleted meanwhile needs no status.
func write[T any, P object[T]](ctx context.Context, w *Writer, kind string, src P, mutate func(P)) (bool, error) {
	if src == nil {
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
		err := w.Client.Status().Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
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
	if wrote {
		log.FromContext(ctx).V(1).Info("Wrote status", "kind", kind, "object", key)
	}
	return wrote, nil
}
