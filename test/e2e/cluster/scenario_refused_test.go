package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/test/e2e"
)

// refusedFor is how long a refused proxy must stay NotReady once refused.
const refusedFor = 3 * time.Second

// handMadeProxy returns a pod started by hand from Gateway A's proxy pod template, with the
// proxy image and its projected token and trust bundle, running as serviceAccount and asking
// for gateway's scope. It carries no label of Gateway A's proxy, so no Service sends it traffic.
func (s *suite) handMadeProxy(ctx context.Context, name, serviceAccount, gateway string) (*corev1.Pod, error) {
	var d appsv1.Deployment
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: proxyName(gatewayA)}, &d); err != nil {
		return nil, fmt.Errorf("gateway %s's proxy deployment: %w", gatewayA, err)
	}
	spec := *d.Spec.Template.Spec.DeepCopy()
	spec.ServiceAccountName = serviceAccount
	spec.AutomountServiceAccountToken = ptr.To(false)
	for i := range spec.Containers {
		c := &spec.Containers[i]
		for j, a := range c.Args {
			if strings.HasPrefix(a, "--gateway-name=") {
				c.Args[j] = "--gateway-name=" + gateway
			}
		}
		// Only /readyz says why it is not ready: no probe restarts it meanwhile.
		c.LivenessProbe = nil
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{
			"app.kubernetes.io/name": "coxswain", "app.kubernetes.io/component": "proxy", "e2e.coxswain.dev/hand-made": name,
		}},
		Spec: spec,
	}, nil
}

// startHandMade creates the pod and returns it once it has an address.
func (s *suite) startHandMade(ctx context.Context, t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	if err := s.client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.client.Delete(context.WithoutCancel(ctx), pod, client.GracePeriodSeconds(0)) // the namespace goes with the cluster anyway
	})
	if err := e2e.Poll(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) error {
		if err := s.client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		if pod.Status.PodIP == "" {
			return fmt.Errorf("pod %s phase %s has no address", pod.Name, pod.Status.Phase)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return pod
}

// staysRefused checks that a refused pod answers NotReady, saying why (the refusal's gRPC code
// and reason, which its /readyz body names), throughout refusedFor, and is not Ready to
// Kubernetes.
func (s *suite) staysRefused(ctx context.Context, t *testing.T, pod *corev1.Pod, why ...string) {
	t.Helper()
	h := health(pod)
	if err := e2e.Poll(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) error {
		_, body, err := h.Readyz(ctx)
		if err != nil {
			return err
		}
		for _, w := range why {
			if !strings.Contains(body, w) {
				return fmt.Errorf("%s readyz %q does not say %q", pod.Name, body, w)
			}
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	if err := e2e.Hold(ctx, refusedFor, 100*time.Millisecond, isNotReady(pod)); err != nil {
		t.Error(err)
	}
	var cur corev1.Pod
	if err := s.client.Get(ctx, client.ObjectKeyFromObject(pod), &cur); err != nil {
		t.Fatal(err)
	}
	if r := podReady(&cur); r == corev1.ConditionTrue {
		t.Errorf("refused pod %s is Ready", pod.Name)
	}
	code, body, _ := health(pod).Readyz(ctx)
	t.Logf("%s: readyz %d %q", pod.Name, code, body)
}

// foreignServiceAccountRefused starts a proxy pod as a ServiceAccount that is neither the
// shared pool's nor a dedicated Gateway's: the controller must refuse it at bootstrap, with a
// BootstrapRejected event naming it and a rejected bootstrap counted, and it must stay NotReady
// with no SVID.
func (s *suite) foreignServiceAccountRefused(t *testing.T) {
	ctx := t.Context()
	if _, err := s.waitServing(ctx, gatewayA, hostA, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	const name = "intruder"
	if err := s.ensure(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}); err != nil {
		t.Fatal(err)
	}
	rejectedBefore, err := s.controllerMetric(ctx, "coxswain_discovery_bootstrap_total", map[string]string{"result": "rejected"})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := s.handMadeProxy(ctx, name, name, gatewayA)
	if err != nil {
		t.Fatal(err)
	}
	pod = s.startHandMade(ctx, t, pod)
	principal := namespace + "/" + name + " "
	if err := e2e.Poll(ctx, time.Minute, 250*time.Millisecond, func(ctx context.Context) error {
		return s.warningEvent(ctx, wellknown.InstallNamespace, wellknown.EventReasonBootstrapRejected, principal)
	}); err != nil {
		t.Errorf("no BootstrapRejected event for %s: %v", name, err)
	}
	if err := e2e.Poll(ctx, 30*time.Second, 250*time.Millisecond, func(ctx context.Context) error {
		n, err := s.controllerMetric(ctx, "coxswain_discovery_bootstrap_total", map[string]string{"result": "rejected"})
		if err != nil {
			return err
		}
		if n <= rejectedBefore {
			return fmt.Errorf("coxswain_discovery_bootstrap_total{result=\"rejected\"} = %v, was %v", n, rejectedBefore)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	if n, err := s.controllerMetric(ctx, "coxswain_discovery_bootstrap_total", map[string]string{"result": "rejected", "reason": "IdentityNotAllowed"}); err != nil || n < 1 {
		t.Errorf("coxswain_discovery_bootstrap_total{result=\"rejected\",reason=\"IdentityNotAllowed\"} = %v (%v), want at least 1", n, err)
	}
	s.staysRefused(ctx, t, pod, "PermissionDenied", "IdentityNotAllowed")
	if n, err := health(pod).Metric(ctx, "coxswain_proxy_svids_issued_total"); err != nil || n != 0 {
		t.Errorf("%s coxswain_proxy_svids_issued_total = %v (%v), want 0", name, n, err)
	}
}

// foreignScopeRefused starts a proxy pod with Gateway A's ServiceAccount, so its projected
// token is one A's proxy gets, configured for Gateway B: it obtains A's SVID, and the stream
// must refuse it B's scope (ScopeNotAuthorized) before any snapshot, so it stays NotReady,
// while B's own proxy serves B.
func (s *suite) foreignScopeRefused(t *testing.T) {
	ctx := t.Context()
	if _, err := s.waitServing(ctx, gatewayA, hostA, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.waitServing(ctx, gatewayB, hostB, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	reason := map[string]string{"reason": "ScopeNotAuthorized"}
	// The scenario before this one may have replaced the controller pods: a scrape of one that
	// is still starting its metrics server is tried again, as the later reads are.
	var deniedBefore float64
	if err := e2e.Poll(ctx, time.Minute, 250*time.Millisecond, func(ctx context.Context) (err error) {
		deniedBefore, err = s.controllerMetric(ctx, "coxswain_discovery_streams_closed_total", reason)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	pod, err := s.handMadeProxy(ctx, "poacher", proxyName(gatewayA), gatewayB)
	if err != nil {
		t.Fatal(err)
	}
	pod = s.startHandMade(ctx, t, pod)
	h := health(pod)
	if err := e2e.Poll(ctx, time.Minute, 250*time.Millisecond, func(ctx context.Context) error {
		n, err := h.Metric(ctx, "coxswain_proxy_svids_issued_total")
		if err != nil {
			return err
		}
		if n < 1 {
			return fmt.Errorf("poacher has no SVID yet")
		}
		return nil
	}); err != nil {
		t.Errorf("the poacher's bootstrap as %s should succeed: %v", proxyName(gatewayA), err)
	}
	if err := e2e.Poll(ctx, time.Minute, 250*time.Millisecond, func(ctx context.Context) error {
		n, err := s.controllerMetric(ctx, "coxswain_discovery_streams_closed_total", reason)
		if err != nil {
			return err
		}
		if n <= deniedBefore {
			return fmt.Errorf("coxswain_discovery_streams_closed_total{reason=\"ScopeNotAuthorized\"} = %v, was %v", n, deniedBefore)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	s.staysRefused(ctx, t, pod, "PermissionDenied", "ScopeNotAuthorized")
	if n, err := h.Metric(ctx, "coxswain_proxy_snapshots_applied_total"); err != nil || n != 0 {
		t.Errorf("poacher coxswain_proxy_snapshots_applied_total = %v (%v), want 0", n, err)
	}
	// B's own proxy still serves B.
	if _, err := s.waitServing(ctx, gatewayB, hostB, 10*time.Second); err != nil {
		t.Error(err)
	}
}
