package status

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/state"
)

// Writer writes the status of a graph to the objects it came from.
type Writer struct {
	// Client patches status subresources.
	Client client.Client
	// Reader re-reads an object after a conflict; use one that bypasses the informer cache
	// (mgr.GetAPIReader()), or the retry may read the same stale object again.
	Reader client.Reader
	// SharedProxyService is the Service of the shared proxy pool, whose addresses shared pool
	// Gateways report. When zero, their addresses are left as they are.
	SharedProxyService types.NamespacedName
	// SharedProxyDeployment is the Deployment of the shared proxy pool, whose readiness shared
	// pool Gateways wait for before they are Programmed. It is not checked while no such
	// Deployment exists.
	SharedProxyDeployment types.NamespacedName
	// Now is the clock of LastTransitionTime, time.Now when nil.
	Now func() time.Time
}

// Write patches the status of every GatewayClass, Gateway and HTTPRoute of g whose stored status
// differs from the computed one, and removes our parent entries from the routes of cs that no
// longer reference our Gateways. It returns how many objects it patched. The objects of cs are
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
	dedicated := proxyServices(g)
	for _, want := range st.Gateways {
		key := types.NamespacedName{Namespace: want.Namespace, Name: want.Name}
		count(w.writeGateway(ctx, cs, cs.Gateways[key], want.Status, dedicated[key], now))
	}
	ours := map[types.NamespacedName][]gwapiv1.RouteParentStatus{}
	for _, want := range st.HTTPRoutes {
		ours[types.NamespacedName{Namespace: want.Namespace, Name: want.Name}] = want.Parents
	}
	for key, route := range cs.HTTPRoutes {
		count(w.writeHTTPRoute(ctx, route, g.ControllerName, ours[key], now))
	}
	return written, errors.Join(errs...)
}

func (w *Writer) writeGatewayClass(ctx context.Context, src *gwapiv1.GatewayClass, want gwapiv1.GatewayClassStatus, now metav1.Time) (bool, error) {
	return write(ctx, w, "GatewayClass", src, func(obj *gwapiv1.GatewayClass) {
		obj.Status = GatewayClass(obj.Status, want, now)
	})
}

func (w *Writer) writeGateway(ctx context.Context, cs *state.ClusterState, src *gwapiv1.Gateway, want gwapiv1.GatewayStatus, proxy types.NamespacedName, now metav1.Time) (bool, error) {
	deployment, checkReady := proxy, true
	if proxy == (types.NamespacedName{}) {
		// The shared pool is installed, not provisioned: when it does not run as a Deployment
		// (a local run with proxies as processes), its readiness is not known here.
		proxy, deployment = w.SharedProxyService, w.SharedProxyDeployment
		_, checkReady = cs.Deployments[deployment]
	}
	return write(ctx, w, "Gateway", src, func(obj *gwapiv1.Gateway) {
		addresses := obj.Status.Addresses
		if proxy != (types.NamespacedName{}) {
			addresses = Addresses(cs.Services[proxy])
		}
		want := *want.DeepCopy()
		want.Conditions = Programmed(want.Conditions, Proxy{
			Addresses:  addresses,
			CheckReady: checkReady,
			Deployment: cs.Deployments[deployment],
		})
		obj.Status = Gateway(obj.Status, want, addresses, now)
	})
}

func (w *Writer) writeHTTPRoute(ctx context.Context, src *gwapiv1.HTTPRoute, controller gwapiv1.GatewayController, want []gwapiv1.RouteParentStatus, now metav1.Time) (bool, error) {
	return write(ctx, w, "HTTPRoute", src, func(obj *gwapiv1.HTTPRoute) {
		obj.Status.Parents = RouteParents(obj.Status.Parents, controller, want, now)
	})
}

// proxyServices maps every dedicated Gateway to its proxy Service.
func proxyServices(g *graph.Graph) map[types.NamespacedName]types.NamespacedName {
	out := map[types.NamespacedName]types.NamespacedName{}
	for _, gw := range g.Gateways {
		if gw.Dedicated {
			out[gw.Key()] = types.NamespacedName{Namespace: gw.Source.Namespace, Name: gw.ProxyName}
		}
	}
	return out
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
