package controllers

import (
	"context"
	"fmt"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/internal/readiness"
	"coxswain.dev/coxswain/internal/settings"
)

// Reasons of the CoxswainConfig Ready condition.
const (
	ReasonReady             = "Ready"
	ReasonInvalidSettings   = "InvalidSettings"
	ReasonComponentNotReady = "ComponentNotReady"
)

// CoxswainConfigReconciler resolves the operator's effective settings from its flags and the
// CoxswainConfig named by Key, publishes them in Store, and reports them with the components'
// conditions in the object's status. It runs on every replica (each serves discovery from its
// own settings); only the leader writes status.
type CoxswainConfigReconciler struct {
	Client   client.Client
	Key      types.NamespacedName
	Base     settings.Settings
	Store    *settings.Store
	Board    *readiness.Board
	Recorder events.EventRecorder
	IsLeader func() bool

	loggedMissing atomic.Bool
}

// +kubebuilder:rbac:groups=gateway.coxswain.dev,resources=coxswainconfigs,verbs=get;list;watch
// +kubebuilder:rbac:groups=gateway.coxswain.dev,resources=coxswainconfigs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile resolves and publishes the settings of the CoxswainConfig.
func (r *CoxswainConfigReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	var cfg v1alpha1.CoxswainConfig
	err := r.Client.Get(ctx, r.Key, &cfg)
	if apierrors.IsNotFound(err) {
		if r.loggedMissing.CompareAndSwap(false, true) {
			logger.Info("No CoxswainConfig found, running on flag and built-in defaults", "config", r.Key)
		}
		r.Store.Set(r.Base)
		r.Store.MarkLoaded()
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("get CoxswainConfig %s: %w", r.Key, err)
	}
	r.loggedMissing.Store(false)

	resolved, resolveErr := settings.Resolve(r.Base, &cfg.Spec)
	if resolveErr == nil && r.Store.Set(resolved) {
		logger.Info("Applied settings", "caMode", resolved.CAMode, "trustDomain", resolved.TrustDomain,
			"svidTTL", resolved.SVIDTTL, "port", resolved.Port, "bootstrapPort", resolved.BootstrapPort)
	}
	if resolveErr != nil {
		logger.Info("Rejected CoxswainConfig, keeping the settings in force", "reason", resolveErr.Error())
	}
	r.Store.MarkLoaded()
	if !r.IsLeader() {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, r.writeStatus(ctx, &cfg, resolveErr)
}

func (r *CoxswainConfigReconciler) writeStatus(ctx context.Context, cfg *v1alpha1.CoxswainConfig, resolveErr error) error {
	next := cfg.Status.DeepCopy()
	next.ObservedGeneration = cfg.Generation
	next.Effective = r.Store.Get().Effective()
	for _, c := range r.Board.Conditions() {
		c.ObservedGeneration = cfg.Generation
		meta.SetStatusCondition(&next.Conditions, c)
	}
	meta.SetStatusCondition(&next.Conditions, r.readyCondition(cfg.Generation, resolveErr))
	if equality.Semantic.DeepEqual(&cfg.Status, next) {
		return nil
	}
	if resolveErr != nil && !meta.IsStatusConditionPresentAndEqual(cfg.Status.Conditions, v1alpha1.ConditionReady, metav1.ConditionFalse) {
		r.Recorder.Eventf(cfg, nil, "Warning", ReasonInvalidSettings, "Resolve", "%s", resolveErr.Error())
	}
	patch := client.MergeFrom(cfg.DeepCopy())
	cfg.Status = *next
	if err := r.Client.Status().Patch(ctx, cfg, patch); err != nil {
		return fmt.Errorf("write CoxswainConfig %s status: %w", r.Key, err)
	}
	return nil
}

func (r *CoxswainConfigReconciler) readyCondition(generation int64, resolveErr error) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionReady, ObservedGeneration: generation}
	ok, blocking := r.Board.AllTrue()
	switch {
	case resolveErr != nil:
		c.Status, c.Reason = metav1.ConditionFalse, ReasonInvalidSettings
		c.Message = "The settings in force were kept: " + resolveErr.Error()
	case !ok:
		c.Status, c.Reason = metav1.ConditionFalse, ReasonComponentNotReady
		c.Message = fmt.Sprintf("%s is %s: %s", blocking.Type, blocking.Status, blocking.Message)
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, ReasonReady, "The settings are valid and discovery serves"
	}
	return c
}

// SetupWithManager registers the reconciler. It watches only the named CoxswainConfig and
// re-runs when a component reports a change on the board.
func (r *CoxswainConfigReconciler) SetupWithManager(mgr ctrl.Manager) error {
	boardEvents := make(chan event.TypedGenericEvent[*v1alpha1.CoxswainConfig])
	// On every replica, as the controller: its first request publishes the settings, which the
	// discovery listeners of each replica wait for.
	err := mgr.Add(everyReplica{manager.RunnableFunc(func(ctx context.Context) error {
		return r.forwardBoard(ctx, boardEvents)
	})})
	if err != nil {
		return fmt.Errorf("add readiness forwarder: %w", err)
	}
	onlyKey := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetNamespace() == r.Key.Namespace && o.GetName() == r.Key.Name
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("coxswainconfig").
		For(&v1alpha1.CoxswainConfig{}, builder.WithPredicates(onlyKey)).
		WatchesRawSource(source.Channel(boardEvents, &handler.TypedEnqueueRequestForObject[*v1alpha1.CoxswainConfig]{})).
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false)}).
		Complete(r)
}

// everyReplica runs a runnable on every replica, not only on the leader.
type everyReplica struct{ manager.RunnableFunc }

// NeedLeaderElection is false.
func (everyReplica) NeedLeaderElection() bool { return false }

// forwardBoard turns board changes into reconcile requests for the configured object. The first
// request also runs once at start, so the settings are published even with no object to watch.
func (r *CoxswainConfigReconciler) forwardBoard(ctx context.Context, out chan<- event.TypedGenericEvent[*v1alpha1.CoxswainConfig]) error {
	obj := &v1alpha1.CoxswainConfig{ObjectMeta: metav1.ObjectMeta{Namespace: r.Key.Namespace, Name: r.Key.Name}}
	send := func() bool {
		select {
		case out <- event.TypedGenericEvent[*v1alpha1.CoxswainConfig]{Object: obj}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if !send() {
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.Board.Changed():
			if !send() {
				return nil
			}
		}
	}
}
