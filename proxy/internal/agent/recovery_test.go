package agent_test

import (
	"os"
	"testing"

	"coxswain.dev/coxswain/discovery/server/servertest"
)

// Tests that a proxy recovers by itself from an immediate CA switch (a new key in External
// mode, a trust-domain change, a restart during an External overlap): its stream handshake no
// longer verifies the controller, so it re-bootstraps against the bundle file the kubelet
// updated, instead of staying Degraded until its scheduled renewal, hours away.
func TestProxyReBootstrapsAfterAnImmediateCASwitch(t *testing.T) {
	t.Parallel()
	c := newController(t)
	v1 := c.set(map[string]string{"route/a": "a"})
	c.start()
	p := newProxy(t, c)
	p.run()
	p.waitVersion(v1)
	bootstraps, _ := c.counts()

	c.stop()
	c.pki = servertest.NewPKI(t)
	if err := os.WriteFile(p.cfg.TrustBundlePath, c.bundlePEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	v2 := c.set(map[string]string{"route/a": "b"})
	c.start()
	p.waitVersion(v2)
	if after, _ := c.counts(); after != bootstraps+1 {
		t.Errorf("%d bootstraps after the switch, want 1", after-bootstraps)
	}
}
