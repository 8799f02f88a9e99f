// Package agent is the control-channel side of the proxy. It bootstraps an SVID with the
// projected ServiceAccount token and a fresh in-memory key, keeps one mTLS snapshot stream open
// with jittered backoff, merges deltas into complete resource sets for the Applier, acknowledges
// or refuses each, renews the SVID at about half its lifetime, and stops for good on a
// wire-version mismatch. The applied routing state is never cleared by any of it.
package agent
