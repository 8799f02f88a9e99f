package agent_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"coxswain.dev/coxswain/discovery/pki/pkitest"
	"coxswain.dev/coxswain/proxy/internal/agent"
)

func newAgent(t *testing.T, p *proxy) *agent.Agent {
	t.Helper()
	a, err := agent.New(p.cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestBootstrapRefusals(t *testing.T) {
	t.Parallel()
	c := newController(t)
	c.start()
	foreign := pkitest.Bundle(pkitest.NewCA(t, "cluster.local")).PEM()
	tests := []struct {
		name          string
		configure     func(*agent.Config)
		wantCode      codes.Code
		wantText      string
		reachesServer bool
	}{
		{"a missing token file fails before any call", func(c *agent.Config) { c.TokenPath = filepath.Join(t.TempDir(), "none") }, codes.Unknown, "read token", false},
		{"an empty token file fails before any call", func(c *agent.Config) { c.TokenPath = writeFile(t, t.TempDir(), "token", []byte("\n")) }, codes.Unknown, "read token: empty", false},
		{"a trust bundle that is not PEM fails before any call", func(c *agent.Config) { c.TrustBundlePath = writeFile(t, t.TempDir(), "ca.crt", []byte("junk")) }, codes.Unknown, "parse trust bundle", false},
		{"a controller outside the trust bundle is refused", func(c *agent.Config) { c.TrustBundlePath = writeFile(t, t.TempDir(), "ca.crt", foreign) }, codes.Unavailable, "certificate signed by unknown authority", false},
		{"a controller with another server name is refused", func(c *agent.Config) { c.ServerName = "evil.example" }, codes.Unavailable, "evil.example", false},
		{"a token the controller does not accept is refused", func(c *agent.Config) { c.TokenPath = writeFile(t, t.TempDir(), "token", []byte("forged")) }, codes.Unauthenticated, "TokenRejected", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := c.counts()
			p := newProxy(t, c, tt.configure)
			_, _, err := newAgent(t, p).BootstrapOnce(t.Context())
			if err == nil {
				t.Fatal("bootstrap succeeded")
			}
			if status.Code(err) != tt.wantCode || !strings.Contains(err.Error(), tt.wantText) {
				t.Fatalf("bootstrap error %v (%s), want %s containing %q", err, status.Code(err), tt.wantCode, tt.wantText)
			}
			if after, _ := c.counts(); (after > before) != tt.reachesServer {
				t.Fatalf("bootstrap calls received %d -> %d", before, after)
			}
		})
	}
}

func TestBootstrapUsesAFreshKeyEveryTime(t *testing.T) {
	t.Parallel()
	c := newController(t)
	c.start()
	p := newProxy(t, c, func(cfg *agent.Config) { cfg.Rand = func() float64 { return 0.5 } })
	a := newAgent(t, p)

	first, renewAt, err := a.BootstrapOnce(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// The kubelet rotates the token file; the next bootstrap reads the new one.
	if err := os.WriteFile(p.cfg.TokenPath, []byte(sharedToken), 0o600); err != nil {
		t.Fatal(err)
	}
	second, _, err := a.BootstrapOnce(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	for _, cert := range []struct {
		name string
		leaf *ecdsa.PrivateKey
	}{{"first", first.PrivateKey.(*ecdsa.PrivateKey)}, {"second", second.PrivateKey.(*ecdsa.PrivateKey)}} {
		if cert.leaf.Curve != elliptic.P256() {
			t.Fatalf("%s key on %s, want P-256", cert.name, cert.leaf.Curve.Params().Name)
		}
	}
	if !first.Leaf.PublicKey.(*ecdsa.PublicKey).Equal(first.PrivateKey.(*ecdsa.PrivateKey).Public()) {
		t.Fatal("the SVID does not certify the agent's key")
	}
	if first.Leaf.PublicKey.(*ecdsa.PublicKey).Equal(second.Leaf.PublicKey) {
		t.Fatal("two bootstraps certified the same key")
	}
	csrKeys, _ := c.keys()
	if len(csrKeys) != 2 || csrKeys[0].(*ecdsa.PublicKey).Equal(csrKeys[1]) {
		t.Fatalf("the controller saw %d CSRs, want 2 with different keys", len(csrKeys))
	}
	if got := first.Leaf.URIs[0].String(); got != sharedID {
		t.Fatalf("SVID for %s, want %s", got, sharedID)
	}
	lifetime := time.Until(first.Leaf.NotAfter)
	if half := time.Until(renewAt); half < lifetime*45/100 || half > lifetime*55/100 {
		t.Fatalf("renewal in %s for a lifetime of %s, want about half", half, lifetime)
	}
}
