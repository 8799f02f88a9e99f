package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"coxswain.dev/coxswain/discovery/wellknown"
)

// svidRotatesUnderLoad restarts the operator with the shortest SVID lifetime and starts a new
// shared proxy, which must renew its SVID about halfway through the minute and reconnect with
// it while requests flow, without failing one.
func (s *suite) svidRotatesUnderLoad(t *testing.T) {
	ctx := t.Context()
	if err := s.shared.Stop(5 * time.Second); err != nil {
		t.Errorf("stop the first shared proxy: %v", err)
	}
	if err := s.operator.Stop(10 * time.Second); err != nil {
		t.Errorf("stop the operator: %v", err)
	}
	s.operator = s.startOperator(t, wellknown.MinSVIDTTL)
	p := s.startProxy(t, ProxyOptions{
		NodeID:          "rotating",
		TokenPath:       s.shared.opts.TokenPath,
		TrustBundlePath: s.bundle,
		HealthPort:      rotatedHealthPort,
	})
	if err := p.waitState(ctx, 60*time.Second, "Ready"); err != nil {
		t.Fatalf("new shared proxy never became Ready: %v", err)
	}
	issued := time.Now()
	expiry, err := p.health.Metric(ctx, "coxswain_proxy_svid_expiry_seconds")
	if err != nil {
		t.Fatal(err)
	}
	if expiry > wellknown.MinSVIDTTL.Seconds() {
		t.Fatalf("SVID expires in %vs, want at most %v: the operator ignored --discovery-svid-ttl", expiry, wellknown.MinSVIDTTL.Seconds())
	}

	load := s.echoLoad(ctx)
	defer load.Stop() //nolint:errcheck // stopped and checked below; this covers a failure before it
	if err := Poll(ctx, 50*time.Second, 200*time.Millisecond, func(ctx context.Context) error {
		n, err := p.health.Metric(ctx, "coxswain_proxy_svids_issued_total")
		if err != nil {
			return err
		}
		if n < 2 {
			return fmt.Errorf("coxswain_proxy_svids_issued_total = %v", n)
		}
		return nil
	}); err != nil {
		t.Fatalf("proxy never renewed its SVID: %v", err)
	}
	t.Logf("SVID renewed %s after the first was issued with a %s lifetime", time.Since(issued).Round(time.Millisecond), wellknown.MinSVIDTTL)
	if err := p.waitState(ctx, 10*time.Second, "Ready"); err != nil {
		t.Errorf("proxy not Ready after the renewal: %v", err)
	}
	// Keep the load on while the proxy reconnects with the new SVID and settles.
	if err := Hold(ctx, 5*time.Second, 100*time.Millisecond, func(ctx context.Context) error {
		if _, failed := load.Counts(); failed > 0 {
			return fmt.Errorf("%d requests failed", failed)
		}
		return p.Ended()
	}); err != nil {
		t.Errorf("after the renewal: %v", err)
	}
	if n, err := p.health.Metric(ctx, "coxswain_proxy_stream_reconnects_total"); err != nil || n < 1 {
		t.Errorf("coxswain_proxy_stream_reconnects_total = %v (%v), want the stream reopened with the new SVID", n, err)
	}
	if n := strings.Count(p.Log(), "Obtained SVID"); n < 2 {
		t.Errorf("proxy logged %d SVIDs, want 2", n)
	}
	ok, failed, failures := load.Stop()
	t.Logf("Requests through the rotation: %d answered, %d failed, over %s", ok, failed, time.Since(issued).Round(time.Second))
	if failed > 0 {
		t.Errorf("%d requests failed through the rotation; the first:\n%v", failed, failures)
	}
	s.shared = p
}
