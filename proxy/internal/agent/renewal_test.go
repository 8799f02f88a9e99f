package agent_test

import (
	"crypto/ecdsa"
	"net/http"
	"slices"
	"testing"
	"time"

	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/proxy/internal/agent"
	"coxswain.dev/coxswain/proxy/internal/clock"
)

func TestSVIDRenewalReconnectsWithAFreshKeyAndKeepsTheRoutes(t *testing.T) {
	t.Parallel()
	c := newController(t)
	// One-minute SVIDs, issued and renewed on a clock the test moves. Two rounds move it by a
	// minute, so every SVID stays valid for the real clock that TLS verifies with.
	clk := clock.NewFake(time.Now())
	c.ttl, c.now = wellknown.MinSVIDTTL, clk.Now
	v1 := c.set(map[string]string{"route/a": "a"})
	c.start()
	p := newProxy(t, c, func(cfg *agent.Config) {
		cfg.Clock = clk
		cfg.Rand = func() float64 { return 0.5 } // no jitter: renew at exactly half
	})
	p.run()
	p.waitVersion(v1)
	p.waitReadiness(http.StatusOK, "Ready")

	for round := 1; round <= 2; round++ {
		// While streaming, the only timer is the renewal's.
		waitFor(t, "the renewal timer", func() bool { return clk.Pending() == 1 })
		due, _ := clk.NextDeadline()
		if due < 29*time.Second || due > 31*time.Second {
			t.Fatalf("round %d: renewal due in %s, want half of the one-minute SVID", round, due)
		}
		clk.Advance(due)
		waitFor(t, "a fresh SVID on a new stream", func() bool {
			bootstraps, streams := c.counts()
			return bootstraps == round+1 && streams == round+1
		})
		p.waitReadiness(http.StatusOK, "Ready: streaming (serving snapshot "+v1)
	}

	c.mu.Lock()
	presented := append([]string(nil), c.presented...)
	c.mu.Unlock()
	if want := []string{"", sharedID, sharedID}; !slices.Equal(presented, want) {
		t.Fatalf("certificates presented on the bootstrap connections %q, want %q: a renewal presents its SVID for the renewal lane", presented, want)
	}
	csrKeys, streamKeys := c.keys()
	for i := range csrKeys {
		if !csrKeys[i].(*ecdsa.PublicKey).Equal(streamKeys[i]) {
			t.Fatalf("stream %d presented another key than bootstrap %d certified", i, i)
		}
		for j := range i {
			if csrKeys[i].(*ecdsa.PublicKey).Equal(csrKeys[j]) {
				t.Fatalf("bootstraps %d and %d used the same key", j, i)
			}
		}
	}
	if p.store.Current().Version() != v1 {
		t.Fatalf("serving %s after rotation, want %s", p.store.Current().Version(), v1)
	}
	p.applier.mu.Lock()
	for i, offer := range p.applier.offers {
		if offer.Version() != v1 || offer.Len() != 1 {
			t.Errorf("apply %d offered version %s with %d resources", i, offer.Version(), offer.Len())
		}
	}
	p.applier.mu.Unlock()
	if p.states.notReadyAfterReady() {
		t.Fatal("the proxy went NotReady during a rotation")
	}
}
