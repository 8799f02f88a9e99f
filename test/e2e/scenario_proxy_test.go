package e2e

import (
	"testing"
	"time"

	"coxswain.dev/coxswain/discovery/wellknown"
)

// Health ports of the suite's proxies.
const (
	sharedHealthPort   = 19001
	intruderHealthPort = 19002
	poacherHealthPort  = 19003
	rotatedHealthPort  = 19004
	rbacHealthPort     = 19005
	privateHealthPort  = 19006
	lateHealthPort     = 19010
)

// impostorHealthPorts are the health ports of the proxies that ask for what is not theirs.
var impostorHealthPorts = [...]int{19007, 19008, 19009}

// sharedProxyBecomesReady starts a shared pool proxy with a token of the shared proxy's
// ServiceAccount and the published trust bundle, as the kubelet would mount them.
func (s *suite) sharedProxyBecomesReady(t *testing.T) {
	ctx := t.Context()
	s.shared = s.startProxy(t, ProxyOptions{
		NodeID:          "shared",
		TokenPath:       s.tokenFile(ctx, t, wellknown.SharedProxyServiceAccount),
		TrustBundlePath: s.bundle,
		HealthPort:      sharedHealthPort,
	})
	if err := s.shared.waitState(ctx, 30*time.Second, "Ready"); err != nil {
		t.Fatalf("shared proxy never became Ready: %v", err)
	}
	issued, err := s.shared.health.Metric(ctx, "coxswain_proxy_svids_issued_total")
	if err != nil {
		t.Fatal(err)
	}
	if issued != 1 {
		t.Errorf("coxswain_proxy_svids_issued_total = %v, want 1", issued)
	}
}
