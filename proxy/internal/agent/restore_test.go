package agent_test

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"coxswain.dev/coxswain/discovery/pki/pkitest"
	"coxswain.dev/coxswain/proxy/internal/agent"
)

// Tests that a proxy restarted while the controller is away serves the snapshot it kept, as
// Degraded, and that a kept snapshot that was tampered with, or whose SVID no longer chains to
// the trust bundle, is not served.
func TestRestartWhileTheControllerIsAwayServesTheKeptSnapshot(t *testing.T) {
	t.Parallel()
	c := newController(t)
	v1 := c.set(map[string]string{"route/a": "a"})
	c.start()
	kept := filepath.Join(t.TempDir(), "snapshot")
	keep := func(cfg *agent.Config) { cfg.SnapshotPath = kept }
	first := newProxy(t, c, keep)
	first.run()
	first.waitVersion(v1)
	waitFor(t, "the kept snapshot", func() bool { _, err := os.Stat(kept); return err == nil })
	first.cancel()
	if err := <-first.done; err != nil {
		t.Fatalf("first agent: %v", err)
	}
	first.done <- nil
	c.stop()

	restarted := newProxy(t, c, keep)
	restarted.run()
	restarted.waitVersion(v1)
	restarted.waitReadiness(http.StatusOK, "Degraded")

	t.Run("a kept snapshot whose SVID does not chain to the trust bundle is not served", func(t *testing.T) {
		other := newProxy(t, c, keep, func(cfg *agent.Config) {
			cfg.TrustBundlePath = writeFile(t, t.TempDir(), "ca.crt", pkitest.Bundle(pkitest.NewCA(t, "cluster.local")).PEM())
		})
		other.run()
		// A failed bootstrap comes after the restore attempt: the controller is down.
		other.waitReadiness(http.StatusServiceUnavailable, "NotReady: bootstrap")
		if other.store.Current() != nil {
			t.Fatalf("served %s", other.store.Current().Version())
		}
	})
	t.Run("a kept snapshot that was altered is not served", func(t *testing.T) {
		data, err := os.ReadFile(kept)
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)-1] ^= 1
		altered := filepath.Join(t.TempDir(), "snapshot")
		writeFile(t, filepath.Dir(altered), "snapshot", data)
		svid, err := os.ReadFile(kept + ".svid")
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Dir(altered), "snapshot.svid", svid)
		other := newProxy(t, c, func(cfg *agent.Config) { cfg.SnapshotPath = altered })
		other.run()
		// A failed bootstrap comes after the restore attempt: the controller is down.
		other.waitReadiness(http.StatusServiceUnavailable, "NotReady: bootstrap")
		if other.store.Current() != nil {
			t.Fatalf("served %s", other.store.Current().Version())
		}
	})
}
