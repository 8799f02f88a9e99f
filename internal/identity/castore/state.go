package castore

import (
	"bytes"
	"crypto/x509"
	"time"

	"coxswain.dev/coxswain/discovery/pki"
)

// apply makes c the CA in force, or none when err is set (fail closed), retiring the CA it
// replaces, and notifies subscribers of any change. It returns the replaced root when another
// CA took over.
func (s *Store) apply(c content, err error, now time.Time) (rotatedFrom *x509.Certificate) {
	if err != nil {
		c = content{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.signing
	signingChanged := (prev == nil) != (c.signing == nil) || prev != nil && !sameCA(prev, c.signing)
	if prev != nil && signingChanged {
		s.retired = retire(s.retired, prev.Certificate(), now.Add(s.leafBoundLocked()))
		if c.signing != nil {
			rotatedFrom = prev.Certificate()
		}
	}
	s.retired = pruneRetired(mergeRetired(s.retired, c.retired...), now, certOf(c.signing), certOf(c.next))
	s.retired = trustedRetired(s.retired, s.opts.Settings.Get().DistrustedRoots)
	bundle := bundleOf(certOf(c.signing), certOf(c.next), s.retired, now)
	changed := signingChanged || (s.loadErr == nil) != (err == nil) || s.bundle == nil || !bundle.Equal(s.bundle)
	s.signing, s.next, s.nextActiveAt, s.loadErr, s.bundle = c.signing, c.next, c.nextActiveAt, err, bundle
	if changed {
		s.notifyLocked()
	}
	return rotatedFrom
}

// observeTTL records the SVID lifetime in force; a retired root is kept for the longest one
// seen while it signed.
func (s *Store) observeTTL() {
	ttl := s.opts.Settings.Get().SVIDTTL
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxTTL = max(s.maxTTL, ttl)
}

// raiseTTL records an SVID lifetime read from the CA Secret: one in force on another replica, or
// before a restart.
func (s *Store) raiseTTL(ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxTTL = max(s.maxTTL, ttl)
}

// longestTTL is the longest SVID lifetime seen, which the CA Secret keeps.
func (s *Store) longestTTL() time.Duration {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.maxTTL
}

func (s *Store) leafBound() time.Duration {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.leafBoundLocked()
}

func (s *Store) leafBoundLocked() time.Duration { return s.maxTTL + leafSlack }

func certOf(ca *pki.CA) *x509.Certificate {
	if ca == nil {
		return nil
	}
	return ca.Certificate()
}

func sameCA(a, b *pki.CA) bool {
	return a != nil && b != nil && bytes.Equal(a.Certificate().Raw, b.Certificate().Raw)
}
