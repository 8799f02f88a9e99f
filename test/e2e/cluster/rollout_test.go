package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/test/e2e"
)

// The Gateways of the rollout scenario: one on the shared pool, one dedicated with parameters of
// its own (two replicas), so that changing them rolls only its proxy.
const (
	gatewayShared = "web-shared"
	hostShared    = "shared.example.com"
	gatewayRolled = "web-rolled"
	paramsRolled  = "rolled"
	hostRolled    = "rolled.example.com"
	sharedPool    = "coxswain-shared-proxy"
)

// proxyDrainPeriod is the proxies' --drain-period (config/proxy and the operator's default);
// minDrainSeen allows the poll interval and the clocks' skew below it.
const (
	proxyDrainPeriod = 5 * time.Second
	minDrainSeen     = proxyDrainPeriod - time.Second
)

// rolloutsUnderLoad puts HTTP/1.1 (kept-alive and a connection per request) and h2c request
// loops on a shared pool Gateway and on a dedicated one, then rolls both at once: a rolling
// restart of the shared pool's Deployment (kubectl rollout restart does the same), and a change
// of the dedicated Gateway's parameters, which the operator turns into a new pod template of its
// proxy Deployment. Every old pod drains (readiness fails, it serves through the drain period,
// then closes its connections gracefully) while new ones take over, with maxUnavailable 0:
// not one request may fail.
func (s *suite) rolloutsUnderLoad(t *testing.T) {
	ctx := t.Context()
	params := &v1alpha1.CoxswainGatewayParameters{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: paramsRolled},
		Spec:       v1alpha1.CoxswainGatewayParametersSpec{Replicas: ptr.To[int32](2)},
	}
	rolled := e2e.Gateway(namespace, gatewayRolled, className, listenerPort)
	rolled.Spec.Infrastructure = &gwapiv1.GatewayInfrastructure{ParametersRef: &gwapiv1.LocalParametersReference{
		Group: gwapiv1.Group(v1alpha1.GroupVersion.Group), Kind: "CoxswainGatewayParameters", Name: paramsRolled,
	}}
	for _, obj := range []client.Object{
		params, rolled, route(gatewayRolled, hostRolled),
		e2e.Gateway(namespace, gatewayShared, className, listenerPort), route(gatewayShared, hostShared),
	} {
		if err := s.ensure(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	var loads []*e2e.Load
	defer func() {
		for _, l := range loads {
			l.Stop() //nolint:errcheck // stopped and checked below; this covers a failure before it
		}
	}()
	for _, g := range []struct{ name, host string }{{gatewayShared, hostShared}, {gatewayRolled, hostRolled}} {
		addr, err := s.waitGatewayServing(ctx, g.name, g.host, 3*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		path := "/rollout"
		clients := []*e2e.Client{e2e.NewClient(addr, false), e2e.NewClient(addr, true), e2e.NewH2CClient(addr)}
		load := e2e.StartLoad(ctx, clients, g.host, path, 5*time.Millisecond, checkEcho(g.host, path))
		loads = append(loads, load)
		if err := waitMoreRequests(ctx, load, 100, 20*time.Second); err != nil {
			t.Fatalf("load through %s before the rollouts: %v", g.name, err)
		}
	}
	dedicated := types.NamespacedName{Namespace: namespace, Name: proxyName(gatewayRolled)}
	if err := e2e.Poll(ctx, 2*time.Minute, 250*time.Millisecond, s.rolledOut(dedicated, nil, nil)); err != nil {
		t.Fatalf("dedicated proxy before the rollout: %v", err)
	}
	sharedKey := types.NamespacedName{Namespace: wellknown.InstallNamespace, Name: sharedPool}
	oldShared, err := s.podUIDs(ctx, sharedKey)
	if err != nil {
		t.Fatal(err)
	}
	oldDedicated, err := s.podUIDs(ctx, dedicated)
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	if err := s.restartDeployment(ctx, sharedKey); err != nil {
		t.Fatal(err)
	}
	if err := s.setAccessLogFormat(ctx, v1alpha1.AccessLogFormatText); err != nil {
		t.Fatal(err)
	}
	rollouts := []*rollout{s.newRollout(sharedKey, oldShared), s.newRollout(dedicated, oldDedicated)}
	if err := watchRollouts(ctx, start, 4*time.Minute, rollouts); err != nil {
		t.Fatalf("rollouts: %v", err)
	}
	for _, r := range rollouts {
		t.Logf("Deployment %s rolled: every old pod gone %s after the rollouts began", r.key, r.done.Round(100*time.Millisecond))
		r.checkDrained(t)
	}
	for i, l := range loads {
		if err := waitMoreRequests(ctx, l, 100, 20*time.Second); err != nil {
			t.Errorf("load %d after the rollouts: %v", i, err)
		}
	}
	checkNoFailure(t, loads[0], "the shared pool's rolling restart (HTTP/1.1 kept-alive, a connection per request, h2c)")
	checkNoFailure(t, loads[1], "the operator's rollout of the dedicated proxy (HTTP/1.1 kept-alive, a connection per request, h2c)")
	loads = nil
}

// podUIDs returns the UIDs of the pods of a Deployment (by its selector), terminating ones
// included.
func (s *suite) podUIDs(ctx context.Context, key types.NamespacedName) (map[types.UID]bool, error) {
	pods, err := s.deploymentPods(ctx, key)
	if err != nil {
		return nil, err
	}
	out := map[types.UID]bool{}
	for _, p := range pods {
		out[p.UID] = true
	}
	return out, nil
}

// deploymentPods returns every pod of a Deployment (by its selector), terminating ones included.
func (s *suite) deploymentPods(ctx context.Context, key types.NamespacedName) ([]corev1.Pod, error) {
	var d appsv1.Deployment
	if err := s.client.Get(ctx, key, &d); err != nil {
		return nil, err
	}
	return s.podsOf(ctx, &d)
}

// podsOf returns every pod of Deployment d (by its selector), terminating ones included.
func (s *suite) podsOf(ctx context.Context, d *appsv1.Deployment) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := s.client.List(ctx, &list, client.InNamespace(d.Namespace), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// deletedAt returns when a terminating pod was deleted: the API server sets its deletion
// timestamp to the end of the grace period.
func deletedAt(p *corev1.Pod) time.Time {
	return p.DeletionTimestamp.Add(-time.Duration(ptr.Deref(p.DeletionGracePeriodSeconds, 0)) * time.Second)
}

// rollout is one Deployment's rollout, watched by watchRollouts.
type rollout struct {
	key types.NamespacedName
	old map[types.UID]bool
	// seen records, for each old pod seen terminating, its deletion and when it was last seen
	// terminating and first seen gone (zero while it is not).
	seen map[types.UID]*drainSeen
	// check is done when the rollout is (rolledOut, and whatever the caller adds).
	check func(context.Context) error
	// done is when check was first done, after the start watchRollouts was given.
	done time.Duration
}

// drainSeen is what watchRollouts saw of an old pod's drain.
type drainSeen struct {
	deleted, last, gone time.Time
}

// newRollout watches the Deployment key replace its pods old.
func (s *suite) newRollout(key types.NamespacedName, old map[types.UID]bool) *rollout {
	r := &rollout{key: key, old: old, seen: map[types.UID]*drainSeen{}}
	r.check = s.rolledOut(key, old, r.observe)
	return r
}

// observe records, from the pods of the Deployment, which of the old pods are terminating and
// which are gone. rolledOut calls it at every poll, whatever the Deployment's status says, so
// that each old pod is seen through its drain.
func (r *rollout) observe(pods []corev1.Pod) {
	now := time.Now()
	present := map[types.UID]bool{}
	for _, p := range pods {
		present[p.UID] = true
		if !r.old[p.UID] || p.DeletionTimestamp == nil {
			continue
		}
		d := r.seen[p.UID]
		if d == nil {
			d = &drainSeen{deleted: deletedAt(&p)}
			r.seen[p.UID] = d
		}
		d.last = now
	}
	for uid, d := range r.seen {
		if !present[uid] && d.gone.IsZero() {
			d.gone = now
		}
	}
}

// watchRollouts checks every rollout together, every 250 ms, so that each old pod is seen while
// it drains, until each is done.
func watchRollouts(ctx context.Context, start time.Time, timeout time.Duration, rollouts []*rollout) error {
	return e2e.Poll(ctx, timeout, 250*time.Millisecond, func(ctx context.Context) error {
		var errs []error
		for _, r := range rollouts {
			if r.done != 0 {
				continue
			}
			if err := r.check(ctx); err != nil {
				errs = append(errs, err)
				continue
			}
			r.done = time.Since(start)
		}
		return errors.Join(errs...)
	})
}

// checkDrained fails t for each old pod that was not seen terminating through most of the drain
// period: one that vanished at once was not drained, and its clients were lucky. A pod last seen
// terminating too early but seen gone only more than a second later, and not before the drain
// could have ended (a poll held up on a loaded machine), cannot be judged either way, and is
// logged.
func (r *rollout) checkDrained(t *testing.T) {
	t.Helper()
	for uid := range r.old {
		d := r.seen[uid]
		if d == nil {
			t.Errorf("old pod %s of %s was never seen terminating; a drain keeps it %s at least", uid, r.key, proxyDrainPeriod)
			continue
		}
		last := d.last.Sub(d.deleted)
		if last >= minDrainSeen {
			continue
		}
		if gone := d.gone.Sub(d.deleted); !d.gone.IsZero() && gone >= minDrainSeen && d.gone.Sub(d.last) > time.Second {
			t.Logf("old pod %s of %s was last seen terminating %s after its deletion and seen gone %s after it: not judged", uid, r.key, last.Round(100*time.Millisecond), gone.Round(100*time.Millisecond))
			continue
		}
		t.Errorf("old pod %s of %s was last seen terminating %s after its deletion; a drain keeps it %s at least", uid, r.key, last.Round(100*time.Millisecond), proxyDrainPeriod)
	}
}

// rolledOut is done when the Deployment's rollout completed (its controller saw the latest
// template, every replica updated and available) and none of the pods in old is left.
// observe, when not nil, is given the Deployment's pods at every call, before the status is
// looked at.
func (s *suite) rolledOut(key types.NamespacedName, old map[types.UID]bool, observe func([]corev1.Pod)) func(context.Context) error {
	return func(ctx context.Context) error {
		var d appsv1.Deployment
		if err := s.client.Get(ctx, key, &d); err != nil {
			return err
		}
		pods, err := s.podsOf(ctx, &d)
		if err != nil {
			return err
		}
		if observe != nil {
			observe(pods)
		}
		want := ptr.Deref(d.Spec.Replicas, 1)
		st := d.Status
		if st.ObservedGeneration < d.Generation || st.UpdatedReplicas != want || st.AvailableReplicas != want || st.Replicas != want {
			return fmt.Errorf("deployment %s: generation %d observed %d, %d replicas, %d updated, %d available, want %d",
				key, d.Generation, st.ObservedGeneration, st.Replicas, st.UpdatedReplicas, st.AvailableReplicas, want)
		}
		var left []string
		for _, p := range pods {
			if !old[p.UID] {
				continue
			}
			state := "running"
			if p.DeletionTimestamp != nil {
				state = "terminating since " + time.Since(deletedAt(&p)).Round(100*time.Millisecond).String()
			}
			left = append(left, p.Name+" "+state)
		}
		if len(left) > 0 {
			return fmt.Errorf("deployment %s: old pods left: %v", key, left)
		}
		return nil
	}
}

// restartDeployment stamps the pod template as kubectl rollout restart does.
func (s *suite) restartDeployment(ctx context.Context, key types.NamespacedName) error {
	var d appsv1.Deployment
	if err := s.client.Get(ctx, key, &d); err != nil {
		return err
	}
	patch := client.MergeFrom(d.DeepCopy())
	if d.Spec.Template.Annotations == nil {
		d.Spec.Template.Annotations = map[string]string{}
	}
	d.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] = time.Now().Format(time.RFC3339)
	return s.client.Patch(ctx, &d, patch)
}

// setAccessLogFormat changes the rolled Gateway's parameters, which changes its proxy's flags.
func (s *suite) setAccessLogFormat(ctx context.Context, f v1alpha1.AccessLogFormat) error {
	var p v1alpha1.CoxswainGatewayParameters
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: paramsRolled}, &p); err != nil {
		return err
	}
	patch := client.MergeFrom(p.DeepCopy())
	if p.Spec.AccessLog != nil && p.Spec.AccessLog.Format != nil && *p.Spec.AccessLog.Format == f {
		f = v1alpha1.AccessLogFormatJSON // a rerun on the same cluster: change it back
	}
	p.Spec.AccessLog = &v1alpha1.AccessLog{Format: &f}
	return s.client.Patch(ctx, &p, patch)
}
