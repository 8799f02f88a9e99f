package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/test/e2e"
)

// replaceProxyPod deletes the Gateway's proxy pod and returns its Ready replacement.
func (s *suite) replaceProxyPod(ctx context.Context, gateway string, old *corev1.Pod) (*corev1.Pod, error) {
	if err := s.client.Delete(ctx, old); err != nil {
		return nil, err
	}
	var next *corev1.Pod
	err := e2e.Poll(ctx, 2*time.Minute, 250*time.Millisecond, func(ctx context.Context) error {
		p, err := s.proxyPod(ctx, gateway)
		if err != nil {
			return err
		}
		if p.UID == old.UID {
			return fmt.Errorf("pod %s not replaced yet", old.Name)
		}
		if err := isReady(p)(ctx); err != nil {
			return err
		}
		next = p
		return nil
	})
	return next, err
}

// rotationUnderLoad keeps a request loop on Gateway A while its proxy, whose SVIDs live one
// minute (the suite's CoxswainConfig), renews its SVID twice and reconnects with each new one:
// not one request may fail.
func (s *suite) rotationUnderLoad(t *testing.T) {
	ctx := t.Context()
	addr, err := s.waitServing(ctx, gatewayA, hostA, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	pod, err := s.proxyPod(ctx, gatewayA)
	if err != nil {
		t.Fatal(err)
	}
	h := health(pod)
	if err := e2e.Poll(ctx, time.Minute, 100*time.Millisecond, isReady(pod)); err != nil {
		t.Fatal(err)
	}
	// An earlier scenario (programmedMeansServed) runs with hour-long SVIDs: a proxy that renewed
	// then holds one until its half-life. Its replacement bootstraps under the suite's minute.
	if exp, err := h.Metric(ctx, "coxswain_proxy_svid_expiry_seconds"); err == nil && exp > wellknown.MinSVIDTTL.Seconds() {
		t.Logf("Proxy pod %s holds an SVID expiring in %.0fs from an earlier scenario's lifetime: replacing the pod", pod.Name, exp)
		if pod, err = s.replaceProxyPod(ctx, gatewayA, pod); err != nil {
			t.Fatal(err)
		}
		h = health(pod)
		if addr, err = s.waitServing(ctx, gatewayA, hostA, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	issued, err := h.Metric(ctx, "coxswain_proxy_svids_issued_total")
	if err != nil {
		t.Fatal(err)
	}
	reconnects, err := h.Metric(ctx, "coxswain_proxy_stream_reconnects_total")
	if err != nil {
		t.Fatal(err)
	}
	if exp, err := h.Metric(ctx, "coxswain_proxy_svid_expiry_seconds"); err != nil || exp > wellknown.MinSVIDTTL.Seconds() {
		t.Fatalf("coxswain_proxy_svid_expiry_seconds = %v (%v), want at most %v", exp, err, wellknown.MinSVIDTTL.Seconds())
	}
	load := startLoad(ctx, addr, hostA, "/rotation")
	defer load.Stop() //nolint:errcheck // stopped and checked below; this covers a failure before it
	start := time.Now()
	// Renewal comes at about half of the lifetime: two of them within two lifetimes.
	if err := e2e.Poll(ctx, 2*wellknown.MinSVIDTTL+30*time.Second, 250*time.Millisecond, func(ctx context.Context) error {
		n, err := h.Metric(ctx, "coxswain_proxy_svids_issued_total")
		if err != nil {
			return err
		}
		if n < issued+2 {
			return fmt.Errorf("coxswain_proxy_svids_issued_total = %v, was %v at the start", n, issued)
		}
		return nil
	}); err != nil {
		t.Fatalf("proxy did not renew its SVID twice: %v", err)
	}
	t.Logf("Two SVID renewals in %s", time.Since(start).Round(100*time.Millisecond))
	// Keep the load on while the proxy reconnects with the last SVID and settles.
	if err := e2e.Hold(ctx, 5*time.Second, 100*time.Millisecond, func(ctx context.Context) error {
		if _, failed := load.Counts(); failed > 0 {
			return fmt.Errorf("%d requests failed", failed)
		}
		return nil
	}); err != nil {
		t.Errorf("after the renewals: %v", err)
	}
	if err := isReady(pod)(ctx); err != nil {
		t.Error(err)
	}
	if n, err := h.Metric(ctx, "coxswain_proxy_stream_reconnects_total"); err != nil || n < reconnects+2 {
		t.Errorf("coxswain_proxy_stream_reconnects_total = %v (%v), was %v: want the stream reopened with each new SVID", n, err, reconnects)
	}
	ok, failed, failures := load.Stop()
	t.Logf("Requests through the rotations: %d answered, %d failed, over %s", ok, failed, time.Since(start).Round(time.Second))
	if ok == 0 {
		t.Error("no request answered")
	}
	if failed > 0 {
		t.Errorf("%d requests failed through the rotations; the first:\n%v", failed, failures)
	}
}
