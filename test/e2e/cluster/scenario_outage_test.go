package cluster

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/test/e2e"
)

// outageLength is how long the proxies must keep serving Degraded with no controller at all.
const outageLength = 5 * time.Second

// controllerOutage scales the controller Deployment to zero and deletes every controller pod
// under a steady request loop through Gateway A: the dedicated proxy and the shared pool must
// turn Degraded (readyz 200, pods still Ready, the discovery_state metric) and keep serving;
// when the Deployment is back, the controller pods must turn Ready and the proxies Ready.
// Not one request may fail through the whole outage.
func (s *suite) controllerOutage(t *testing.T) {
	ctx := t.Context()
	proxies, load := s.loadThroughGatewayA(t, "/outage")
	defer load.Stop() //nolint:errcheck // stopped and checked below; this covers a failure before it
	proxy := &proxies[0]

	replicas := s.scaleController(ctx, t, 0)
	// Restore the controller whatever happens, so that later scenarios find one.
	defer func() {
		if t.Failed() {
			s.scaleController(context.WithoutCancel(ctx), t, replicas)
		}
	}()
	if err := s.client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(wellknown.InstallNamespace), controllerLabels); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("delete the controller pods: %v", err)
	}
	deleted := time.Now()
	if err := e2e.Poll(ctx, time.Minute, 100*time.Millisecond, s.noControllerPod); err != nil {
		t.Fatal(err)
	}
	t.Logf("Every controller pod gone %s after the delete", time.Since(deleted).Round(100*time.Millisecond))
	for i := range proxies {
		p := &proxies[i]
		if err := e2e.Poll(ctx, 30*time.Second, 50*time.Millisecond, isDegraded(p)); err != nil {
			t.Fatalf("proxy did not turn Degraded: %v", err)
		}
	}
	t.Logf("%d proxies Degraded %s after the delete", len(proxies), time.Since(deleted).Round(100*time.Millisecond))
	if err := e2e.Hold(ctx, outageLength, 200*time.Millisecond, func(ctx context.Context) error {
		for i := range proxies {
			if err := isDegraded(&proxies[i])(ctx); err != nil {
				return err
			}
		}
		return s.stillReady(ctx, proxies)
	}); err != nil {
		t.Fatalf("during the outage: %v", err)
	}
	if v, err := health(proxy).Metric(ctx, `coxswain_proxy_discovery_state{state="Degraded"}`); err != nil || v != 1 {
		t.Errorf("coxswain_proxy_discovery_state{state=\"Degraded\"} = %v (%v), want 1", v, err)
	}
	if err := waitMoreRequests(ctx, load, 200, 20*time.Second); err != nil {
		t.Fatalf("load during the outage: %v", err)
	}

	s.scaleController(ctx, t, replicas)
	restored := time.Now()
	if err := e2e.Poll(ctx, 3*time.Minute, 250*time.Millisecond, s.controllerAvailable(replicas)); err != nil {
		t.Fatalf("controller not back: %v", err)
	}
	t.Logf("Controller Ready %s after it was scaled back to %d", time.Since(restored).Round(100*time.Millisecond), replicas)
	for i := range proxies {
		if err := e2e.Poll(ctx, 2*time.Minute, 100*time.Millisecond, isReady(&proxies[i])); err != nil {
			t.Errorf("proxy not Ready after the controller came back: %v", err)
		}
	}
	t.Logf("Proxies Ready %s after the controller was scaled back (outage %s)",
		time.Since(restored).Round(100*time.Millisecond), time.Since(deleted).Round(100*time.Millisecond))
	if err := waitMoreRequests(ctx, load, 50, 10*time.Second); err != nil {
		t.Errorf("load after the outage: %v", err)
	}
	checkNoFailure(t, load, "the outage")
}

// loadThroughGatewayA starts a request loop through Gateway A once it serves, and returns the
// proxies that must survive a controller outage: A's first, then the shared pool's.
func (s *suite) loadThroughGatewayA(t *testing.T, path string) ([]corev1.Pod, *e2e.Load) {
	t.Helper()
	ctx := t.Context()
	addr, err := s.waitServing(ctx, gatewayA, hostA, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := s.proxyPod(ctx, gatewayA)
	if err != nil {
		t.Fatal(err)
	}
	shared, err := s.pods(ctx, client.InNamespace(wellknown.InstallNamespace), sharedPoolLabels)
	if err != nil {
		t.Fatal(err)
	}
	load := startLoad(ctx, addr, hostA, path)
	if err := waitMoreRequests(ctx, load, 50, 10*time.Second); err != nil {
		load.Stop() //nolint:errcheck // the test ends here
		t.Fatalf("load before the outage: %v", err)
	}
	return append([]corev1.Pod{*proxy}, shared...), load
}

// checkNoFailure stops the load and fails the test if one request failed.
func checkNoFailure(t *testing.T, load *e2e.Load, during string) {
	t.Helper()
	ok, failed, failures := load.Stop()
	t.Logf("Requests through %s: %d answered, %d failed", during, ok, failed)
	if ok == 0 {
		t.Errorf("no request answered through %s", during)
	}
	if failed > 0 {
		t.Errorf("%d requests failed through %s; the first:\n%v", failed, during, failures)
	}
}

// controllerPodsReplaced deletes every controller pod at once, the Deployment left as it is,
// under a request loop through Gateway A: the proxies turn Degraded while no replacement serves
// and Ready once the new pods do, and not one request fails.
func (s *suite) controllerPodsReplaced(t *testing.T) {
	ctx := t.Context()
	proxies, load := s.loadThroughGatewayA(t, "/replaced")
	defer load.Stop() //nolint:errcheck // stopped and checked below; this covers a failure before it
	var d appsv1.Deployment
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: wellknown.InstallNamespace, Name: controllerName}, &d); err != nil {
		t.Fatal(err)
	}
	old, err := s.pods(ctx, client.InNamespace(wellknown.InstallNamespace), controllerLabels)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(wellknown.InstallNamespace), controllerLabels); err != nil {
		t.Fatalf("delete the controller pods: %v", err)
	}
	deleted := time.Now()
	for i := range proxies {
		if err := e2e.Poll(ctx, 30*time.Second, 20*time.Millisecond, isDegraded(&proxies[i])); err != nil {
			t.Fatalf("proxy did not turn Degraded: %v", err)
		}
	}
	t.Logf("%d proxies Degraded %s after the %d controller pods were deleted", len(proxies), time.Since(deleted).Round(100*time.Millisecond), len(old))
	if err := e2e.Poll(ctx, 3*time.Minute, 250*time.Millisecond, func(ctx context.Context) error {
		// The Deployment's status may still count the deleted pods: look at the new ones.
		pods, err := s.pods(ctx, client.InNamespace(wellknown.InstallNamespace), controllerLabels)
		if err != nil {
			return err
		}
		ready := int32(0)
		for i := range pods {
			if !slices.ContainsFunc(old, func(o corev1.Pod) bool { return o.UID == pods[i].UID }) && podReady(&pods[i]) == corev1.ConditionTrue {
				ready++
			}
		}
		if want := ptr.Deref(d.Spec.Replicas, 1); ready < want {
			return fmt.Errorf("%d of %d replacement controller pods Ready", ready, want)
		}
		return nil
	}); err != nil {
		t.Fatalf("controller not replaced: %v", err)
	}
	t.Logf("Replacement controller pods Ready %s after the delete", time.Since(deleted).Round(100*time.Millisecond))
	for i := range proxies {
		if err := e2e.Poll(ctx, 2*time.Minute, 100*time.Millisecond, isReady(&proxies[i])); err != nil {
			t.Errorf("proxy not Ready after the controller was replaced: %v", err)
		}
	}
	t.Logf("Proxies Ready %s after the delete", time.Since(deleted).Round(100*time.Millisecond))
	if err := waitMoreRequests(ctx, load, 50, 10*time.Second); err != nil {
		t.Errorf("load after the controller was replaced: %v", err)
	}
	checkNoFailure(t, load, "the replacement of the controller")
}

// scaleController sets the controller Deployment's replicas and returns the former number.
func (s *suite) scaleController(ctx context.Context, t *testing.T, replicas int32) int32 {
	t.Helper()
	var d appsv1.Deployment
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: wellknown.InstallNamespace, Name: controllerName}, &d); err != nil {
		t.Fatal(err)
	}
	was := ptr.Deref(d.Spec.Replicas, 1)
	patch := client.MergeFrom(d.DeepCopy())
	d.Spec.Replicas = ptr.To(replicas)
	if err := s.client.Patch(ctx, &d, patch); err != nil {
		t.Fatalf("scale %s to %d: %v", controllerName, replicas, err)
	}
	return was
}

func (s *suite) noControllerPod(ctx context.Context) error {
	var list corev1.PodList
	if err := s.client.List(ctx, &list, client.InNamespace(wellknown.InstallNamespace), controllerLabels); err != nil {
		return err
	}
	if n := len(list.Items); n > 0 {
		return fmt.Errorf("%d controller pods left", n)
	}
	return nil
}

// controllerAvailable returns nil once the controller Deployment has replicas Ready pods.
func (s *suite) controllerAvailable(replicas int32) func(context.Context) error {
	return func(ctx context.Context) error {
		var d appsv1.Deployment
		if err := s.client.Get(ctx, client.ObjectKey{Namespace: wellknown.InstallNamespace, Name: controllerName}, &d); err != nil {
			return err
		}
		if d.Status.ReadyReplicas < replicas {
			return fmt.Errorf("deployment %s: %d of %d replicas Ready", controllerName, d.Status.ReadyReplicas, replicas)
		}
		return nil
	}
}

// stillReady returns nil while every one of the pods is still Ready to Kubernetes: Degraded
// answers 200, so the Services keep sending traffic to them.
func (s *suite) stillReady(ctx context.Context, pods []corev1.Pod) error {
	for _, p := range pods {
		var cur corev1.Pod
		if err := s.client.Get(ctx, client.ObjectKeyFromObject(&p), &cur); err != nil {
			return err
		}
		if podReady(&cur) != corev1.ConditionTrue {
			return fmt.Errorf("pod %s/%s is not Ready during the outage", p.Namespace, p.Name)
		}
	}
	return nil
}
