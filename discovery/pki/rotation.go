package pki

import (
	"crypto/x509"
	"time"
)

// RotationFraction is the share of a CA's lifetime after which a new CA should take over.
const RotationFraction = 2.0 / 3.0

// NeedsRotation reports whether the CA has lived past RotationFraction of its lifetime, or is
// outside its validity period, at now.
func NeedsRotation(ca *x509.Certificate, now time.Time) bool {
	if now.Before(ca.NotBefore) || !now.Before(ca.NotAfter) {
		return true
	}
	lifetime := ca.NotAfter.Sub(ca.NotBefore)
	return now.Sub(ca.NotBefore) >= time.Duration(float64(lifetime)*RotationFraction)
}

// RetiredRoot is a root that no longer signs, with the latest NotAfter of any certificate it
// signed (SVIDs and serving certificates).
type RetiredRoot struct {
	Certificate    *x509.Certificate
	LastLeafExpiry time.Time
}

// PublishRoots returns the roots the trust bundle must hold at now: the current root and every
// retired root that may still have a live certificate, that is, whose LastLeafExpiry and own
// NotAfter are both after now. Peers holding old certificates keep working through a rotation.
// To publish a new root before it signs anything, pass it as current and the signing root as
// retired with the end of its signing period as LastLeafExpiry.
func PublishRoots(current *x509.Certificate, retired []RetiredRoot, now time.Time) *Bundle {
	var roots []*x509.Certificate
	if current != nil {
		roots = append(roots, current)
	}
	for _, r := range retired {
		if r.Certificate == nil || !now.Before(r.Certificate.NotAfter) || !now.Before(r.LastLeafExpiry) {
			continue
		}
		roots = append(roots, r.Certificate)
	}
	return NewBundle(roots...)
}
