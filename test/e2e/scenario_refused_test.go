package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"coxswain.dev/coxswain/discovery/wellknown"
)

// impostorsAreRefused starts two proxies that must get nothing: one whose token belongs to a
// ServiceAccount off the issuance allowlist, and one of the shared pool's ServiceAccount that
// asks for Gateway default/web's dedicated snapshot. Both must stay NotReady; the first must
// be refused at bootstrap with a BootstrapRejected event naming it, the second on the stream.
func (s *suite) impostorsAreRefused(t *testing.T) {
	ctx := t.Context()
	intruder := s.startProxy(t, ProxyOptions{
		NodeID:          "intruder",
		TokenPath:       s.tokenFile(ctx, t, "intruder"),
		TrustBundlePath: s.bundle,
		HealthPort:      intruderHealthPort,
	})
	poacher := s.startProxy(t, ProxyOptions{
		NodeID:           "poacher",
		TokenPath:        s.tokenFile(ctx, t, wellknown.SharedProxyServiceAccount),
		TrustBundlePath:  s.bundle,
		HealthPort:       poacherHealthPort,
		GatewayNamespace: "default", GatewayName: "web",
	})
	defer stopQuietly(intruder, poacher)

	if err := Poll(ctx, 30*time.Second, 100*time.Millisecond, func(ctx context.Context) error {
		return s.bootstrapRejected(ctx, wellknown.InstallNamespace+"/intruder")
	}); err != nil {
		t.Errorf("no BootstrapRejected event for the intruder: %v", err)
	}
	for _, p := range []*proxy{intruder, poacher} {
		if err := Poll(ctx, 30*time.Second, 100*time.Millisecond, func(context.Context) error {
			if !p.LogContains("PermissionDenied") {
				return fmt.Errorf("%s has not logged PermissionDenied", p.Name)
			}
			return nil
		}); err != nil {
			t.Error(err)
		}
	}
	// Having been refused, neither may turn Ready in the next retries.
	for _, p := range []*proxy{intruder, poacher} {
		if err := Hold(ctx, 2*time.Second, 100*time.Millisecond, p.notReady); err != nil {
			t.Error(err)
		}
		code, body, _ := p.health.Readyz(ctx)
		t.Logf("%s: readyz %d %q", p.Name, code, body)
	}
	if issued, err := intruder.health.Metric(ctx, "coxswain_proxy_svids_issued_total"); err != nil || issued != 0 {
		t.Errorf("intruder coxswain_proxy_svids_issued_total = %v (%v), want 0", issued, err)
	}
}

// bootstrapRejected returns nil when a BootstrapRejected Warning event in the install
// namespace names principal.
func (s *suite) bootstrapRejected(ctx context.Context, principal string) error {
	var events corev1.EventList
	if err := s.cluster.Client.List(ctx, &events, client.InNamespace(wellknown.InstallNamespace)); err != nil {
		return err
	}
	var seen []string
	for _, e := range events.Items {
		if e.Reason != wellknown.EventReasonBootstrapRejected {
			continue
		}
		if e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, principal+" ") {
			return nil
		}
		seen = append(seen, e.Type+" "+e.Message)
	}
	return fmt.Errorf("BootstrapRejected events: %q", seen)
}

// notReady returns nil while the proxy's /readyz says 503 NotReady.
func (p *proxy) notReady(ctx context.Context) error {
	code, body, err := p.health.Readyz(ctx)
	if err != nil {
		return err
	}
	if code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "NotReady:") {
		return fmt.Errorf("%s readyz %d %q, want 503 NotReady", p.Name, code, body)
	}
	return nil
}

func stopQuietly(ps ...*proxy) {
	for _, p := range ps {
		_ = p.Stop(5 * time.Second) // the log tells why it stopped badly, if it did
	}
}
