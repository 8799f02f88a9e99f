package cluster

import (
	"context"
	"fmt"
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
	proxies := append([]corev1.Pod{*proxy}, shared...)
	load := startLoad(ctx, addr, hostA, "/outage")
	defer load.Stop() //nolint:errcheck // stopped and checked below; this covers a failure before it
	if err := waitMoreRequests(ctx, load, 50, 10*time.Second); err != nil {
		t.Fatalf("load before the outage: %v", err)
	}

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
	ok, failed, failures := load.Stop()
	t.Logf("Requests through the outage: %d answered, %d failed", ok, failed)
	if failed > 0 {
		t.Errorf("%d requests failed through the outage; the first:\n%v", failed, failures)
	}
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
