package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/graph/conditions"
	"coxswain.dev/coxswain/internal/provision"
	"coxswain.dev/coxswain/internal/rebuild"
)

// ReasonProxyNameTaken is the reason of the Warning event on a Gateway whose dedicated proxy
// name is held by an object the Gateway does not own; nothing is provisioned over it.
const ReasonProxyNameTaken = "ProxyNameTaken"

// ReasonImageNotAllowed is the reason of the Warning event on a Gateway whose own parameters name
// an image the CoxswainConfig's spec.proxy.allowedImages does not list; its proxy runs the
// default image.
const ReasonImageNotAllowed = "ImageNotAllowed"

// ReasonTracingEndpointNotAllowed is the reason of the Warning event on a Gateway whose own
// parameters name a tracing endpoint the CoxswainConfig's spec.proxy.allowedTracingEndpoints
// does not admit; its proxy traces as spec.proxy.tracing says.
const ReasonTracingEndpointNotAllowed = "TracingEndpointNotAllowed"

// ReasonTolerationNotAllowed is the reason of the Warning event on a Gateway whose parameters
// ask for a toleration no proxy carries (of a control-plane taint, or of every taint); its
// proxy carries the others.
const ReasonTolerationNotAllowed = "TolerationNotAllowed"

// ReasonProvisionRefused is the reason of the Warning event on a Gateway one of whose proxy
// objects the API server refused: the admission policy of config/admission (a Deployment of an
// image it does not admit, any write in a kube-* namespace or, with the namespace gate, in an
// unlabelled one), or RBAC. The write is retried with backoff.
const ReasonProvisionRefused = "ProvisionRefused"

// errParametersLag says the graph, built from the parameters' metadata cache, found parameters
// that the typed cache no longer holds (or not yet).
var errParametersLag = errors.New("parameters seen by the graph are not in the cache")

// ProvisionReconciler ensures each Gateway's dedicated proxy, or its Service on the shared pool:
// it renders the desired objects with internal/provision, applies them with server-side apply,
// and deletes the objects the Gateway owns that are no longer wanted. It runs on the leader only.
type ProvisionReconciler struct {
	// Client reads the informer cache and writes.
	Client client.Client
	// Cache, when set, is what reconciles read the cluster state from: the manager's cache
	// (mgr.GetCache()), as for GatewayAPIReconciler. Client when nil.
	Cache client.Reader
	// Reader reads past the cache (mgr.GetAPIReader()): the cache holds only our labelled
	// objects, and a name may be taken by an object without our labels.
	Reader client.Reader
	// Graph are the options of the graph; its Namespace (the operator's) holds the shared pool
	// and the Services of its Gateways.
	Graph graph.Options
	// Defaults returns the current operator-wide proxy settings.
	Defaults func() provision.Defaults
	// DefaultsChanged, when set, receives a value after each change of what Defaults returns
	// (settings.Store.Subscribe()); every Gateway is then reconciled again.
	DefaultsChanged <-chan struct{}
	// SharedPoolLimits, when set, gives the graph's per-namespace caps of the shared pool
	// (MaxSharedGatewaysPerNamespace, MaxSharedPortsPerNamespace) at every reconcile, as the
	// pipeline's graph gets them.
	SharedPoolLimits func() (gateways, ports int32)
	// ListenerLimits, when set, gives the graph's caps of ListenerSets at every reconcile, as
	// the pipeline's graph gets them.
	ListenerLimits func() graph.ListenerLimits
	// Metrics, when set, records what the shared pool's caps and the image allowlist refuse.
	Metrics  *ProvisionMetrics
	Recorder events.EventRecorder
}

// +kubebuilder:rbac:groups="",resources=serviceaccounts;services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=gateways/finalizers,verbs=update

// Reconcile makes the dedicated proxy objects of one Gateway what the graph wants.
func (r *ProvisionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	in, err := rebuild.Load(ctx, stateReader(r.Cache, r.Client))
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("read cluster state: %w", err)
	}
	g := r.build(in)
	r.Metrics.observeSharedPool(g)
	// The Services of shared pool Gateways live in the operator's namespace, out of the garbage
	// collector's reach: delete those no Gateway wants any more, whichever Gateway this is.
	if err := r.sweepShared(ctx, g); err != nil {
		return ctrl.Result{}, err
	}
	src, ok := in.State.Gateways[req.NamespacedName]
	if !ok {
		return ctrl.Result{}, nil // deleted: the garbage collector removes what it owned
	}
	gw := gatewayOf(g, req.NamespacedName)
	if gw != nil {
		r.warnSharedPoolLimits(ctx, src, gw)
	}
	if gw != nil && r.keepServing(src, gw) {
		return ctrl.Result{}, nil
	}
	if err := r.ensureShared(ctx, src, gw); err != nil {
		return ctrl.Result{}, err
	}
	want, err := r.desired(ctx, gw)
	if errors.Is(err, errParametersLag) {
		// The two views of the parameters disagree for a moment; prune nothing meanwhile.
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	taken, err := r.taken(ctx, src, want)
	if err != nil {
		return ctrl.Result{}, err
	}
	if taken != nil {
		r.refuseTaken(ctx, src, taken)
		return ctrl.Result{}, nil
	}
	for _, obj := range want {
		if err := r.apply(ctx, obj); err != nil {
			r.reportWriteRefused(src, obj, err)
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, r.prune(ctx, src, want)
}

// build returns the graph of in.
func (r *ProvisionReconciler) build(in rebuild.Input) *graph.Graph {
	opts := r.graphOptions()
	if in.CRDBundleVersion != "" {
		opts.CRDBundleVersion = in.CRDBundleVersion
	}
	return graph.Build(in.State, opts)
}

func (r *ProvisionReconciler) graphOptions() graph.Options {
	opts := r.Graph
	if opts.Namespace == "" {
		opts.Namespace = wellknown.InstallNamespace
	}
	if r.SharedPoolLimits != nil {
		opts.MaxSharedGatewaysPerNamespace, opts.MaxSharedPortsPerNamespace = r.SharedPoolLimits()
	}
	if r.ListenerLimits != nil {
		opts.ListenerLimits = r.ListenerLimits()
	}
	return opts
}

// warnSharedPoolLimits records a Warning event on a Gateway that the shared pool's caps of its
// namespace refuse (NamespaceLimitReached) or leave listeners without an internal port
// (PortsExhausted), besides its conditions, and logs it.
func (r *ProvisionReconciler) warnSharedPoolLimits(ctx context.Context, src *gwapiv1.Gateway, gw *graph.Gateway) {
	accepted := meta.FindStatusCondition(gw.Conditions, string(gwapiv1.GatewayConditionAccepted))
	if accepted != nil && accepted.Reason == conditions.ReasonNamespaceLimitReached {
		r.Recorder.Eventf(src, nil, corev1.EventTypeWarning, accepted.Reason, "Provision", "%s", accepted.Message)
		log.FromContext(ctx).Info("Refused a shared pool Gateway over its namespace's limit", "reason", accepted.Reason)
		return
	}
	var refused []string
	msg := ""
	for _, l := range gw.AllListeners() {
		if c := meta.FindStatusCondition(l.Conditions, string(gwapiv1.ListenerConditionProgrammed)); c != nil && c.Reason == conditions.ReasonPortsExhausted {
			refused, msg = append(refused, l.QualifiedName()), c.Message
		}
	}
	if len(refused) > 0 {
		r.Recorder.Eventf(src, nil, corev1.EventTypeWarning, conditions.ReasonPortsExhausted, "Provision",
			"Listeners %s are not served: %s", strings.Join(refused, ", "), msg)
		log.FromContext(ctx).Info("Left shared pool listeners without an internal port", "listeners", refused, "reason", conditions.ReasonPortsExhausted)
	}
}

// gatewayOf returns the Gateway of key in g, nil when it is not one of ours.
func gatewayOf(g *graph.Graph, key types.NamespacedName) *graph.Gateway {
	for _, gw := range g.Gateways {
		if gw.Key() == key {
			return gw
		}
	}
	return nil
}

// refuseTaken reports that the name of a proxy object is held by an object the Gateway does not
// own, over which nothing is provisioned.
func (r *ProvisionReconciler) refuseTaken(ctx context.Context, gw *gwapiv1.Gateway, taken client.Object) {
	msg := fmt.Sprintf("%s %s/%s exists and is not owned by this Gateway; no proxy is provisioned over it",
		kindOf(taken), taken.GetNamespace(), taken.GetName())
	r.Recorder.Eventf(gw, nil, corev1.EventTypeWarning, ReasonProxyNameTaken, "Provision", "%s", msg)
	log.FromContext(ctx).Info("Refused to provision over a foreign object", "object", client.ObjectKeyFromObject(taken), "kind", kindOf(taken))
}

// ensureShared applies the Service of a shared pool Gateway, unless its name is held by a
// Service that is not this Gateway's.
func (r *ProvisionReconciler) ensureShared(ctx context.Context, src *gwapiv1.Gateway, gw *graph.Gateway) error {
	if gw == nil {
		return nil
	}
	m, ok := provision.SharedModelOf(gw, r.graphOptions().Namespace, r.Defaults())
	if !ok {
		return nil
	}
	want := provision.DesiredSharedService(m)
	cur := &corev1.Service{}
	err := r.Reader.Get(ctx, client.ObjectKeyFromObject(want), cur)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("get Service %s: %w", client.ObjectKeyFromObject(want), err)
	case !provision.IsSharedService(cur) || cur.Annotations[graph.SharedServiceGatewayAnnotation] != gw.Key().String():
		r.refuseTaken(ctx, src, want)
		return nil
	}
	return r.apply(ctx, want)
}

// sweepShared deletes the shared pool Services that no Gateway of g wants: their Gateway is
// gone, moved to a dedicated proxy, not accepted, or no longer ours. The Service of a Gateway
// refused over a mistake in its parameters stays, as a dedicated proxy does (see keepServing),
// so the Gateway keeps its address.
func (r *ProvisionReconciler) sweepShared(ctx context.Context, g *graph.Graph) error {
	wanted := map[string]bool{}
	for _, gw := range g.Gateways {
		switch {
		case gw.SharedService != "":
			wanted[gw.SharedService] = true
		case refusedByMistake(gw):
			wanted[wellknown.SharedGatewayServiceName(gw.Source.Namespace, gw.Source.Name)] = true
		}
	}
	var list corev1.ServiceList
	sel := client.MatchingLabels{provision.ManagedByLabel: provision.ManagedBy, provision.ComponentLabel: provision.SharedComponent}
	if err := r.Client.List(ctx, &list, client.InNamespace(r.graphOptions().Namespace), sel); err != nil {
		return fmt.Errorf("list shared pool Services: %w", err)
	}
	var errs []error
	for i := range list.Items {
		svc := &list.Items[i]
		if !provision.IsSharedService(svc) || wanted[svc.Name] {
			continue
		}
		log.FromContext(ctx).Info("Deleting the Service of a shared pool Gateway no longer served",
			"service", client.ObjectKeyFromObject(svc), "gateway", svc.Annotations[graph.SharedServiceGatewayAnnotation])
		errs = append(errs, client.IgnoreNotFound(r.Client.Delete(ctx, svc, client.Preconditions{UID: ptr.To(svc.GetUID())})))
	}
	return errors.Join(errs...)
}

// keepServing reports whether the Gateway's proxy objects are to be left exactly as they are:
// its parameters are broken (missing, or a foreign kind) or its proxy name refused. That is a
// user's mistake, reported by a Warning event besides the Gateway's condition; a proxy already
// serving is not torn down over it.
func (r *ProvisionReconciler) keepServing(src *gwapiv1.Gateway, gw *graph.Gateway) bool {
	if !refusedByMistake(gw) {
		return false
	}
	accepted := meta.FindStatusCondition(gw.Conditions, string(gwapiv1.GatewayConditionAccepted))
	r.Recorder.Eventf(src, nil, corev1.EventTypeWarning, accepted.Reason, "Provision", "%s", accepted.Message)
	return true
}

// refusedByMistake reports whether gw is not accepted because of broken parameters or a refused
// proxy name.
func refusedByMistake(gw *graph.Gateway) bool {
	accepted := meta.FindStatusCondition(gw.Conditions, string(gwapiv1.GatewayConditionAccepted))
	if accepted == nil || accepted.Status == metav1.ConditionTrue {
		return false
	}
	return accepted.Reason == string(gwapiv1.GatewayReasonInvalidParameters) || accepted.Reason == conditions.ReasonProxyNameConflict
}

// desired renders the objects the Gateway's dedicated proxy needs; none when it gets no proxy.
func (r *ProvisionReconciler) desired(ctx context.Context, gw *graph.Gateway) ([]client.Object, error) {
	if gw == nil || !gw.Dedicated || gw.ProxyName == "" {
		return nil, nil
	}
	params := &v1alpha1.CoxswainGatewayParameters{}
	err := r.Client.Get(ctx, gw.Parameters, params)
	if apierrors.IsNotFound(err) {
		return nil, errParametersLag
	}
	if err != nil {
		return nil, fmt.Errorf("get parameters %s: %w", gw.Parameters, err)
	}
	m, ok := provision.ModelOf(gw, params, r.Defaults())
	if !ok {
		return nil, nil
	}
	r.reportRefused(ctx, gw, m)
	return provision.Objects(m), nil
}

// reportRefused records a Warning event on the Gateway, a log line and a count for each part
// of its parameters that its proxy does without.
func (r *ProvisionReconciler) reportRefused(ctx context.Context, gw *graph.Gateway, m provision.Model) {
	if m.RefusedImage != "" {
		r.Metrics.imageRefused()
		r.Recorder.Eventf(gw.Source, nil, corev1.EventTypeWarning, ReasonImageNotAllowed, "Provision",
			"Image %q of CoxswainGatewayParameters %s is not in the CoxswainConfig's spec.proxy.allowedImages; the proxy runs the default image",
			m.RefusedImage, gw.Parameters)
		log.FromContext(ctx).Info("Refused the image of a Gateway's own parameters", "image", m.RefusedImage, "parameters", gw.Parameters)
	}
	if m.RefusedTracingEndpoint != "" {
		r.Metrics.tracingEndpointRefused()
		r.Recorder.Eventf(gw.Source, nil, corev1.EventTypeWarning, ReasonTracingEndpointNotAllowed, "Provision",
			"Tracing endpoint %q of CoxswainGatewayParameters %s is not admitted by the CoxswainConfig's spec.proxy.allowedTracingEndpoints "+
				"(a loopback, link-local or metadata host only by an exact entry); the proxy traces as spec.proxy.tracing says",
			provision.RedactedEndpoint(m.RefusedTracingEndpoint), gw.Parameters)
		log.FromContext(ctx).Info("Refused the tracing endpoint of a Gateway's own parameters",
			"endpoint", provision.RedactedEndpoint(m.RefusedTracingEndpoint), "parameters", gw.Parameters)
	}
	if len(m.RefusedTolerations) > 0 {
		r.Metrics.tolerationsRefused()
		keys := make([]string, len(m.RefusedTolerations))
		for i, t := range m.RefusedTolerations {
			keys[i] = fmt.Sprintf("%q", t.Key)
		}
		r.Recorder.Eventf(gw.Source, nil, corev1.EventTypeWarning, ReasonTolerationNotAllowed, "Provision",
			"Tolerations of keys %s of CoxswainGatewayParameters %s are left out: no proxy tolerates the control-plane taints or every taint (an empty key)",
			strings.Join(keys, ", "), gw.Parameters)
		log.FromContext(ctx).Info("Left out tolerations of a Gateway's parameters", "keys", keys, "parameters", gw.Parameters)
	}
}

// reportWriteRefused records a Warning event on gw when the API server refused to write obj
// (Forbidden or Invalid: admission or RBAC), so that its owner sees why it has no proxy; other
// errors are transient and only retried.
func (r *ProvisionReconciler) reportWriteRefused(gw *gwapiv1.Gateway, obj client.Object, err error) {
	var status apierrors.APIStatus
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !errors.As(err, &status) {
		return
	}
	note := fmt.Sprintf("The API server refused %s %s/%s: %s", kindOf(obj), obj.GetNamespace(), obj.GetName(), status.Status().Message)
	if len(note) > wellknown.MaxEventNoteBytes {
		note = note[:wellknown.MaxEventNoteBytes]
	}
	r.Recorder.Eventf(gw, nil, corev1.EventTypeWarning, ReasonProvisionRefused, "Provision", "%s", note)
}

// taken returns the first object of want whose name is held by an object the Gateway does not
// control, read past the cache; nil when there is none.
func (r *ProvisionReconciler) taken(ctx context.Context, gw *gwapiv1.Gateway, want []client.Object) (client.Object, error) {
	for _, obj := range want {
		cur := obj.DeepCopyObject().(client.Object)
		err := r.Reader.Get(ctx, client.ObjectKeyFromObject(obj), cur)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("get %s %s: %w", kindOf(obj), client.ObjectKeyFromObject(obj), err)
		case !controlledBy(cur, gw):
			return obj, nil
		}
	}
	return nil, nil
}

// apply server-side applies obj with our field manager, taking back any field edited by hand.
func (r *ProvisionReconciler) apply(ctx context.Context, obj client.Object) error {
	ac, err := applyConfiguration(obj)
	if err != nil {
		return err
	}
	if err := r.Client.Apply(ctx, ac, client.FieldOwner(provision.FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply %s %s: %w", kindOf(obj), client.ObjectKeyFromObject(obj), err)
	}
	return nil
}

func kindOf(obj client.Object) string {
	return obj.GetObjectKind().GroupVersionKind().Kind
}

// applyConfiguration turns a rendered object into an apply configuration without status.
func applyConfiguration(obj client.Object) (runtime.ApplyConfiguration, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("convert %T: %w", obj, err)
	}
	delete(u, "status")
	unstructured.RemoveNestedField(u, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u, "spec", "template", "metadata", "creationTimestamp")
	return client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: u}), nil
}

// prune deletes the proxy objects the Gateway controls that want does not hold.
func (r *ProvisionReconciler) prune(ctx context.Context, gw *gwapiv1.Gateway, want []client.Object) error {
	keep := map[string]bool{}
	for _, obj := range want {
		keep[fmt.Sprintf("%T/%s", obj, obj.GetName())] = true
	}
	sel := client.MatchingLabelsSelector{Selector: labels.SelectorFromSet(labels.Set{
		provision.ManagedByLabel: provision.ManagedBy, provision.ComponentLabel: provision.Component,
	})}
	var errs []error
	for _, list := range []client.ObjectList{&corev1.ServiceAccountList{}, &appsv1.DeploymentList{}, &corev1.ServiceList{}, &policyv1.PodDisruptionBudgetList{}} {
		if err := r.Client.List(ctx, list, client.InNamespace(gw.Namespace), sel); err != nil {
			errs = append(errs, fmt.Errorf("list %T: %w", list, err))
			continue
		}
		errs = append(errs, forEachItem(list, func(obj client.Object) error {
			if !controlledBy(obj, gw) || keep[fmt.Sprintf("%T/%s", obj, obj.GetName())] {
				return nil
			}
			log.FromContext(ctx).Info("Deleting proxy object no longer wanted", "object", client.ObjectKeyFromObject(obj), "type", fmt.Sprintf("%T", obj))
			return client.IgnoreNotFound(r.Client.Delete(ctx, obj, client.Preconditions{UID: ptr.To(obj.GetUID())}))
		}))
	}
	return errors.Join(errs...)
}

func forEachItem(list client.ObjectList, fn func(client.Object) error) error {
	var errs []error
	switch l := list.(type) {
	case *corev1.ServiceAccountList:
		for i := range l.Items {
			errs = append(errs, fn(&l.Items[i]))
		}
	case *appsv1.DeploymentList:
		for i := range l.Items {
			errs = append(errs, fn(&l.Items[i]))
		}
	case *corev1.ServiceList:
		for i := range l.Items {
			errs = append(errs, fn(&l.Items[i]))
		}
	case *policyv1.PodDisruptionBudgetList:
		for i := range l.Items {
			errs = append(errs, fn(&l.Items[i]))
		}
	}
	return errors.Join(errs...)
}

func controlledBy(obj metav1.Object, gw *gwapiv1.Gateway) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.UID == gw.UID
}

// SetupWithManager registers the reconciler: a Gateway is reconciled when it, the objects it
// owns, a shared pool Service, or anything that can change its listeners or parameters changes.
func (r *ProvisionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	allGateways := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var list gwapiv1.GatewayList
		if err := r.Client.List(ctx, &list); err != nil {
			log.FromContext(ctx).Error(err, "Failed to list Gateways")
			return nil
		}
		out := make([]reconcile.Request, 0, len(list.Items))
		for i := range list.Items {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
		return out
	})
	tlsOnly := predicate.NewPredicateFuncs(func(o client.Object) bool {
		s, ok := o.(*corev1.Secret)
		return ok && s.Type == corev1.SecretTypeTLS
	})
	b := ctrl.NewControllerManagedBy(mgr)
	if r.DefaultsChanged != nil {
		b = b.WatchesRawSource(source.Func(func(ctx context.Context, q queue) error {
			go r.requeueOnChange(ctx, q)
			return nil
		}))
	}
	return b.
		Named("provision").
		For(&gwapiv1.Gateway{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&corev1.ServiceAccount{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Watches(&gwapiv1.GatewayClass{}, allGateways, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.CoxswainGatewayParameters{}, allGateways, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&gwapiv1.ReferenceGrant{}, allGateways).
		Watches(&corev1.Secret{}, allGateways, builder.WithPredicates(tlsOnly)).
		// A shared pool Service records its Gateway's internal ports, which a hand edit of
		// one Service can take from another Gateway: every Gateway is looked at again.
		Watches(&corev1.Service{}, allGateways, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool { return provision.IsSharedService(o) }))).
		Complete(r)
}

// requeueOnChange reconciles every Gateway after each change of the defaults.
func (r *ProvisionReconciler) requeueOnChange(ctx context.Context, q queue) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.DefaultsChanged:
			var list gwapiv1.GatewayList
			if err := r.Client.List(ctx, &list); err != nil {
				log.FromContext(ctx).Error(err, "Failed to list Gateways")
				continue
			}
			for i := range list.Items {
				q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
			}
		}
	}
}

// ProvisionCacheOptions returns the cache restrictions of the provisioned kinds: only objects
// labelled app.kubernetes.io/name=coxswain (ours and the shared pool's) are cached.
func ProvisionCacheOptions() map[client.Object]cache.ByObject {
	ours := labels.SelectorFromSet(labels.Set{provision.NameLabel: "coxswain"})
	return map[client.Object]cache.ByObject{
		&corev1.ServiceAccount{}:        {Label: ours},
		&appsv1.Deployment{}:            {Label: ours},
		&policyv1.PodDisruptionBudget{}: {Label: ours},
	}
}
