package agent_test

import (
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"coxswain.dev/coxswain/discovery/pki/pkitest"
	"coxswain.dev/coxswain/discovery/server/servertest"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/proxy/internal/agent"
	"coxswain.dev/coxswain/proxy/internal/clock"
)

// writeBundle rewrites the proxy's mounted trust bundle, as the kubelet does when the ConfigMap
// changes.
func (p *proxy) writeBundle(data []byte) {
	p.t.Helper()
	if err := os.WriteFile(p.cfg.TrustBundlePath, data, 0o600); err != nil {
		p.t.Fatal(err)
	}
}

// offered reports whether the agent ever asked the applier to apply version.
func (p *proxy) offered(version string) bool {
	p.applier.mu.Lock()
	defer p.applier.mu.Unlock()
	for _, set := range p.applier.offers {
		if set.Version() == version {
			return true
		}
	}
	return false
}

// Tests that distrust reaches the proxy at its next handshake: once a root leaves the mounted
// bundle file, an impostor holding a controller certificate of that root is refused on both
// listeners, although the bundle of the proxy's last bootstrap still holds the root, and none of
// its snapshots is applied.
func TestARootRemovedFromTheFileIsDistrustedAtTheNextHandshake(t *testing.T) {
	t.Parallel()
	distrusted := pkitest.NewCA(t, servertest.TrustDomain)
	c := newController(t)
	// The overlap bundle: the root about to be distrusted beside the signing CA.
	overlap := pkitest.Bundle(distrusted, c.pki.CA)
	c.pki.Bundle.Set(overlap)
	v1 := c.set(map[string]string{"route/a": "a"})
	c.start()
	p := newProxy(t, c)
	p.writeBundle(overlap.PEM())
	p.run()
	p.waitVersion(v1)
	p.waitReadiness(http.StatusOK, "Ready")
	bootstraps, streams := c.counts()

	// The root is distrusted: the controller and the mounted file drop it. An impostor with a
	// controller certificate (its SPIFFE ID and DNS name) of that root takes both listeners.
	c.stop()
	c.pki.Bundle.Set(pkitest.Bundle(c.pki.CA))
	p.writeBundle(pkitest.Bundle(c.pki.CA).PEM())
	c.pki.ServerCert.Set(pkitest.SVID(t, distrusted, servertest.ControllerID, pkitest.DNSNames(servertest.ServerName)))
	v2 := c.set(map[string]string{"route/a": "impostor"})
	closed, failed := p.states.closes(), p.states.failedBootstraps()
	c.start()

	// The stream handshake is refused, which makes the proxy bootstrap again at once; that
	// handshake is refused too.
	waitFor(t, "a refused stream handshake and a refused bootstrap", func() bool {
		return p.states.closes() > closed && p.states.failedBootstraps() > failed
	})
	code, body := p.readiness()
	if code != http.StatusOK || !strings.HasPrefix(body, "Degraded") || !strings.Contains(body, "unknown authority") {
		t.Fatalf("readyz %d %q, want Degraded naming the unknown authority", code, body)
	}
	if b, s := c.counts(); b != bootstraps || s != streams {
		t.Fatalf("the impostor received %d bootstraps and %d streams", b-bootstraps, s-streams)
	}
	if p.offered(v2) || p.store.Current().Version() != v1 {
		t.Fatalf("the impostor's snapshot was applied: serving %s", p.store.Current().Version())
	}
}

// Tests that a root added to the mounted bundle file is trusted at the next stream handshake,
// without a bootstrap: the file is re-read at every handshake.
func TestARootAddedToTheFileIsTrustedAtTheNextHandshake(t *testing.T) {
	t.Parallel()
	c := newController(t)
	v1 := c.set(map[string]string{"route/a": "a"})
	c.start()
	p := newProxy(t, c)
	p.run()
	p.waitVersion(v1)
	bootstraps, _ := c.counts()

	// The controller switches to a new root that only the file carries: its bootstrap service
	// still hands out the old bundle.
	added := pkitest.NewCA(t, servertest.TrustDomain)
	c.stop()
	p.writeBundle(pkitest.Bundle(c.pki.CA, added).PEM())
	c.streamCert = pkitest.SVID(t, added, servertest.ControllerID, pkitest.DNSNames(servertest.ServerName))
	v2 := c.set(map[string]string{"route/a": "b"})
	c.start()
	p.waitVersion(v2)
	if after, _ := c.counts(); after != bootstraps {
		t.Fatalf("%d bootstraps to trust the added root, want none", after-bootstraps)
	}
}

// Tests that while the mounted bundle file does not read or parse, the controller is verified
// against the bundle of the last bootstrap on the stream.
func TestStreamFallsBackToTheLastBundleWhileTheFileIsUnusable(t *testing.T) {
	t.Parallel()
	for name, breakFile := range map[string]func(*proxy){
		"a removed file": func(p *proxy) {
			if err := os.Remove(p.cfg.TrustBundlePath); err != nil {
				p.t.Fatal(err)
			}
		},
		"a file that does not parse": func(p *proxy) { p.writeBundle([]byte("not a bundle\n")) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := newController(t)
			v1 := c.set(map[string]string{"route/a": "a"})
			c.start()
			p := newProxy(t, c)
			p.run()
			p.waitVersion(v1)
			bootstraps, streams := c.counts()

			c.stop()
			breakFile(p)
			v2 := c.set(map[string]string{"route/a": "b"})
			c.start()
			p.waitVersion(v2)
			if b, s := c.counts(); b != bootstraps || s <= streams {
				t.Fatalf("%d bootstraps and %d streams after the restart, want 0 and at least 1", b-bootstraps, s-streams)
			}
		})
	}
}

// Tests that a renewal while the mounted bundle file is unreadable verifies the bootstrap
// listener against the bundle of the last bootstrap instead of failing.
func TestRenewalFallsBackToTheLastBundleWhileTheFileIsUnusable(t *testing.T) {
	t.Parallel()
	c := newController(t)
	clk := clock.NewFake(time.Now())
	c.ttl, c.now = wellknown.MinSVIDTTL, clk.Now
	v1 := c.set(map[string]string{"route/a": "a"})
	c.start()
	p := newProxy(t, c, func(cfg *agent.Config) {
		cfg.Clock = clk
		cfg.Rand = func() float64 { return 0.5 }
	})
	p.run()
	p.waitVersion(v1)
	p.waitReadiness(http.StatusOK, "Ready")
	if err := os.Remove(p.cfg.TrustBundlePath); err != nil {
		t.Fatal(err)
	}

	waitFor(t, "the renewal timer", func() bool { return clk.Pending() == 1 })
	due, _ := clk.NextDeadline()
	clk.Advance(due)
	waitFor(t, "a renewed SVID on a new stream", func() bool {
		bootstraps, streams := c.counts()
		return bootstraps == 2 && streams == 2
	})
	p.waitReadiness(http.StatusOK, "Ready: streaming (serving snapshot "+v1)
	if n := p.states.failedBootstraps(); n != 0 {
		t.Fatalf("%d bootstraps failed", n)
	}
}
