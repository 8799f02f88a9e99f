package controllers

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/trace"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/rebuild"
)

// GatewayAPIReconciler rebuilds the whole translation pipeline whenever a Gateway API object or
// something it references changes. Change events only record their kind and trigger the
// Debouncer; each burst becomes one reconcile of a single request, which reads the cache, runs
// the Pipeline and records the rebuild's duration, by trigger, in the Pipeline's Metrics. It
// runs on every replica, since each serves proxies from its own cache; the Pipeline writes
// status only on the leader.
type GatewayAPIReconciler struct {
	// Client reads the informer cache.
	Client client.Client
	// Cache, when set, is what rebuilds read the cluster state from: the manager's cache
	// (mgr.GetCache()), whose informer stores rebuild.Load reads without copying any object.
	// Client when nil.
	Cache     client.Reader
	Pipeline  *rebuild.Pipeline
	Debouncer *rebuild.Debouncer
	// Tracer, when set, traces every rebuild: a span with its trigger and a child per step.
	Tracer trace.Tracer
	// Elected closes when this replica becomes the leader (mgr.Elected()); a rebuild follows so
	// the new leader writes status at once. Nil when not needed.
	Elected <-chan struct{}
	// SettingsChanged, when set, receives a value after each change of the operator's settings
	// (settings.Store.Subscribe()); a rebuild follows, so a setting the Pipeline reads (such as
	// its TrustAnyEndpointSlice) takes effect without another change.
	SettingsChanged <-chan struct{}

	// changes collects the kinds of the changes the watches saw since the last rebuild.
	changes rebuild.Changes

	afterRebuild func(rebuild.Input, rebuild.Result, error) // tests observe rebuilds here
	// refs keeps the Services, Secrets and ConfigMaps the latest cluster state references: a
	// change of any other Service, EndpointSlice, Secret or ConfigMap triggers no rebuild.
	refs rebuild.ReferenceFilter
}

// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=gatewayclasses;gateways;httproutes;grpcroutes;tlsroutes;tcproutes;udproutes;referencegrants;backendtlspolicies;listenersets,verbs=get;list;watch
// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=gatewayclasses/status;gateways/status;httproutes/status;grpcroutes/status;tlsroutes/status;tcproutes/status;udproutes/status;backendtlspolicies/status;listenersets/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=services;secrets;namespaces;configmaps,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=gateway.coxswain.dev,resources=coxswaingatewayparameters,verbs=get;list;watch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch

// Reconcile rebuilds snapshots, scope authority and status from the cache, and records how
// long it took and what triggered it.
func (r *GatewayAPIReconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	start := time.Now()
	trigger, since := r.changes.Take()
	r.refs.BeginLoad()
	in, err := rebuild.Load(ctx, stateReader(r.Cache, r.Client))
	if err != nil {
		r.refs.Loaded(nil)
		r.changes.Restore(trigger, since)
		return ctrl.Result{}, fmt.Errorf("read cluster state: %w", err)
	}
	r.refs.Loaded(in.State)
	in.ChangedAt = since
	tctx, span := rebuild.StartRebuild(ctx, r.Tracer, trigger, since)
	res, err := r.Pipeline.Rebuild(tctx, in)
	rebuild.EndRebuild(span, res, err)
	r.Debouncer.Cost(time.Since(start))
	if r.afterRebuild != nil {
		r.afterRebuild(in, res, err)
	}
	if err != nil {
		r.changes.Restore(trigger, since)
		return ctrl.Result{}, err
	}
	took := time.Since(start)
	r.Pipeline.Metrics.ObserveRebuild(trigger, took)
	logRebuild(log.FromContext(ctx), trigger, took, res)
	return ctrl.Result{}, nil
}

// stateReader is what rebuild.Load reads the cluster state from: the manager's cache when
// given, whose informer stores it reads without copying any object, else c.
func stateReader(cache, c client.Reader) client.Reader {
	if cache != nil {
		return cache
	}
	return c
}

// logRebuild logs a rebuild that changed something at V(0) and every rebuild at V(1), where the
// line also names the new version of every changed scope; every scope that failed gets an error
// line of its own.
func logRebuild(logger logr.Logger, trigger rebuild.Trigger, took time.Duration, res rebuild.Result) {
	for _, f := range res.Failed {
		logger.Error(f.Err, "Scope kept its last snapshot", "scope", f.Scope.String())
	}
	verbosity := 1 // an unchanged world is routine
	if len(res.Changed) > 0 || len(res.Removed) > 0 || len(res.Failed) > 0 || res.AuthorityChanged || res.StatusWritten > 0 {
		verbosity = 0
	}
	kv := []any{
		"trigger", trigger, "duration", took, "scopes", len(res.Scopes), "changed", len(res.Changed),
		"removed", len(res.Removed), "failed", len(res.Failed), "authorityChanged", res.AuthorityChanged, "statusWritten", res.StatusWritten,
	}
	if logger.V(1).Enabled() {
		versions := make([]string, 0, len(res.Changed))
		for _, s := range res.Changed {
			versions = append(versions, s.String()+"@"+res.Versions[s])
		}
		removed := make([]string, 0, len(res.Removed))
		for _, s := range res.Removed {
			removed = append(removed, s.String())
		}
		kv = append(kv, "changedVersions", versions, "removedScopes", removed)
	}
	logger.V(verbosity).Info("Rebuilt snapshots", kv...)
}

// SetupWithManager registers the reconciler and its watches.
func (r *GatewayAPIReconciler) SetupWithManager(mgr ctrl.Manager) error {
	spec := builder.WithPredicates(predicate.GenerationChangedPredicate{})
	controllerName := r.Pipeline.Graph.ControllerName
	if controllerName == "" {
		controllerName = wellknown.GatewayControllerName
	}
	ours := predicate.NewPredicateFuncs(func(o client.Object) bool {
		gc, ok := o.(*gwapiv1.GatewayClass)
		return ok && gc.Spec.ControllerName == controllerName
	})
	tlsOnly := predicate.NewPredicateFuncs(func(o client.Object) bool {
		s, ok := o.(*corev1.Secret)
		return ok && s.Type == corev1.SecretTypeTLS
	})
	proxyDeployment := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetLabels()[rebuild.ProxyLabel] == rebuild.ProxyLabelValue
	})
	bundle := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == rebuild.GatewayClassCRDName })
	referenced := builder.WithPredicates(predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return r.refs.Matters(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool { return r.refs.Matters(e.ObjectOld) || r.refs.Matters(e.ObjectNew) },
		DeleteFunc: func(e event.DeleteEvent) bool { return r.refs.Matters(e.Object) },
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("gatewayapi").
		WatchesRawSource(source.Func(r.startDebouncer)).
		Watches(&gwapiv1.GatewayClass{}, r.on("GatewayClass"), builder.WithPredicates(ours, predicate.GenerationChangedPredicate{})).
		Watches(&gwapiv1.Gateway{}, r.on("Gateway"), spec).
		Watches(&gwapiv1.HTTPRoute{}, r.on("HTTPRoute"), spec).
		Watches(&gwapiv1.GRPCRoute{}, r.on("GRPCRoute"), spec).
		Watches(&gwapiv1.TLSRoute{}, r.on("TLSRoute"), spec).
		Watches(&gwapiv1.TCPRoute{}, r.on("TCPRoute"), spec).
		Watches(&gwapiv1.UDPRoute{}, r.on("UDPRoute"), spec).
		Watches(&gwapiv1.ListenerSet{}, r.on("ListenerSet"), spec).
		Watches(&gwapiv1.ReferenceGrant{}, r.on("ReferenceGrant"), spec).
		Watches(&gwapiv1.BackendTLSPolicy{}, r.on("BackendTLSPolicy"), spec).
		Watches(&corev1.ConfigMap{}, r.on("ConfigMap"), referenced).
		Watches(&corev1.Service{}, r.on("Service"), referenced).
		Watches(&appsv1.Deployment{}, r.on("Deployment"), builder.WithPredicates(proxyDeployment)).
		// The scope authority grants a dedicated Gateway only the ServiceAccount it controls.
		Watches(&corev1.ServiceAccount{}, r.on("ServiceAccount")).
		Watches(&discoveryv1.EndpointSlice{}, r.on("EndpointSlice"), referenced).
		Watches(&corev1.Secret{}, r.on("Secret"), builder.WithPredicates(tlsOnly), referenced).
		Watches(&corev1.Namespace{}, r.on("Namespace"), builder.WithPredicates(predicate.LabelChangedPredicate{})).
		WatchesMetadata(metadataOf(rebuild.GatewayParametersGVK), r.on("CoxswainGatewayParameters"), spec).
		WatchesMetadata(metadataOf(rebuild.CRDGVK), r.on("CustomResourceDefinition"), builder.WithPredicates(bundle, predicate.AnnotationChangedPredicate{})).
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false), MaxConcurrentReconciles: 1}).
		Complete(r)
}

// on returns the handler of the watch of kind: it records the change, then triggers a rebuild.
func (r *GatewayAPIReconciler) on(kind string) handler.Funcs {
	trigger := func() {
		r.changes.Add(kind)
		r.Debouncer.Trigger()
	}
	return handler.Funcs{
		CreateFunc:  func(context.Context, event.CreateEvent, queue) { trigger() },
		UpdateFunc:  func(context.Context, event.UpdateEvent, queue) { trigger() },
		DeleteFunc:  func(context.Context, event.DeleteEvent, queue) { trigger() },
		GenericFunc: func(context.Context, event.GenericEvent, queue) { trigger() },
	}
}

type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// startDebouncer turns each burst of changes into one request, and asks for a rebuild when this
// replica is elected. It also starts the pipeline's background status writes, so a rebuild
// never waits for them.
func (r *GatewayAPIReconciler) startDebouncer(ctx context.Context, q queue) error {
	rebuildAll := reconcile.Request{}
	rebuildAll.Name = "gateway-api"
	go r.Pipeline.RunStatus(ctx)
	go r.Debouncer.Run(ctx, func() { q.Add(rebuildAll) })
	if r.SettingsChanged != nil {
		go r.rebuildOnSettings(ctx)
	}
	if r.Elected != nil {
		go func() {
			select {
			case <-r.Elected:
				r.changes.Add(rebuild.TriggerElected)
				r.Debouncer.Trigger()
			case <-ctx.Done():
			}
		}()
	}
	return nil
}

// rebuildOnSettings asks for a rebuild after each change of the settings, until ctx ends.
func (r *GatewayAPIReconciler) rebuildOnSettings(ctx context.Context) {
	for {
		select {
		case <-r.SettingsChanged:
			r.changes.Add("CoxswainConfig")
			r.Debouncer.Trigger()
		case <-ctx.Done():
			return
		}
	}
}

func metadataOf(gvk schema.GroupVersionKind) *metav1.PartialObjectMetadata {
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(gvk)
	return obj
}

// GatewayAPICacheOptions returns the cache restrictions main.go should merge into the manager's
// cache.Options.ByObject: only kubernetes.io/tls Secrets are cached (no other Secret's bytes
// ever reach this process through the informer), and of the CRDs only the GatewayClass one.
func GatewayAPICacheOptions() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&corev1.Secret{}:           {Field: fields.OneTermEqualSelector("type", string(corev1.SecretTypeTLS))},
		metadataOf(rebuild.CRDGVK): {Field: fields.OneTermEqualSelector("metadata.name", rebuild.GatewayClassCRDName)},
	}
}
