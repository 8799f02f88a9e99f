package castore

import (
	"fmt"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"coxswain.dev/coxswain/discovery/pki"
)

// policy is what the Auto mode rotation plan depends on besides the Secret.
type policy struct {
	td       spiffeid.TrustDomain
	lifetime time.Duration
	// overlap is how long a successor is published before it signs.
	overlap time.Duration
	// leafBound is how long after a root stops signing a leaf it signed may still be live.
	leafBound time.Duration
}

// newCA generates a CA; tests replace it to count or fail generations.
var newCA = pki.NewCA

// planAuto returns what the Auto mode Secret should hold at now, and whether that differs from c:
// a successor prepared at two thirds of the signing CA's life, promoted once its overlap ends,
// and an immediate replacement when the signing CA cannot sign for the trust domain at all.
func planAuto(c content, p policy, now time.Time) (content, bool, error) {
	switch {
	case !usable(c.signing, p.td, now) && usable(c.next, p.td, now):
		return promote(c, p, now), true, nil
	case !usable(c.signing, p.td, now):
		fresh, err := newCA(p.td, p.lifetime, now)
		if err != nil {
			return c, false, fmt.Errorf("generate CA: %w", err)
		}
		c.next = fresh
		return promote(c, p, now), true, nil
	case c.next != nil && !usable(c.next, p.td, now):
		c.next, c.nextActiveAt = nil, time.Time{}
		return c, true, nil
	case c.next == nil && pki.NeedsRotation(c.signing.Certificate(), now):
		fresh, err := newCA(p.td, p.lifetime, now)
		if err != nil {
			return c, false, fmt.Errorf("generate successor CA: %w", err)
		}
		c.next, c.nextActiveAt = fresh, now.Add(p.overlap)
		return c, true, nil
	case c.next != nil && !now.Before(c.nextActiveAt):
		return promote(c, p, now), true, nil
	}
	return c, false, nil
}

// promote makes the successor sign and retires the signing root.
func promote(c content, p policy, now time.Time) content {
	if c.signing != nil {
		c.retired = retire(c.retired, c.signing.Certificate(), now.Add(p.leafBound))
	}
	c.signing, c.next, c.nextActiveAt = c.next, nil, time.Time{}
	return c
}

// rotationDue is when pki.NeedsRotation starts answering true for a CA.
func rotationDue(ca *pki.CA) time.Time {
	cert := ca.Certificate()
	lifetime := cert.NotAfter.Sub(cert.NotBefore)
	return cert.NotBefore.Add(time.Duration(float64(lifetime) * pki.RotationFraction))
}
