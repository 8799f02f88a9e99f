package agent

import (
	"coxswain.dev/coxswain/discovery/client"
	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/discovery/tlsconfig"
)

// trustBundle is what the agent verifies the controller against on both listeners: the mounted
// bundle file as it reads at that handshake, alone, so that a root removed from the file is
// distrusted and a root added to it trusted at the next handshake. Only while the file does not
// read or parse does the bundle of the last bootstrap stand in for it; before the first
// bootstrap there is none, and the handshake fails.
type trustBundle struct {
	agent *Agent
	last  *pki.Bundle
}

var _ tlsconfig.BundleSource = trustBundle{}

// trust returns the trust bundle source with last, the bundle of the last bootstrap (nil before
// the first one), as its fallback.
func (a *Agent) trust(last *pki.Bundle) trustBundle { return trustBundle{agent: a, last: last} }

// Bundle reads the mounted file, or falls back to the last bundle when it is unusable.
func (t trustBundle) Bundle() (*pki.Bundle, error) {
	a := t.agent
	file, err := client.ReadBundle(a.cfg.TrustBundlePath)
	if err == nil {
		if a.bundleFallback.CompareAndSwap(true, false) {
			a.cfg.Logger.Info("Trust bundle file usable again", "path", a.cfg.TrustBundlePath)
		}
		return file, nil
	}
	if t.last == nil {
		return nil, err
	}
	if a.bundleFallback.CompareAndSwap(false, true) {
		a.cfg.Logger.Info("Trust bundle file unusable, verifying the controller against the last bootstrap's bundle",
			"path", a.cfg.TrustBundlePath, "error", err.Error())
	}
	return t.last, nil
}
