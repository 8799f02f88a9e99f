package castore

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"coxswain.dev/coxswain/discovery/pki"
)

// Fingerprint is how discovery.ca.distrustedRoots names a root: the SHA-256 of its DER, in
// lowercase hex.
func Fingerprint(ca *pki.CA) string {
	sum := sha256.Sum256(ca.Certificate().Raw)
	return hex.EncodeToString(sum[:])
}

func distrusted(ca *pki.CA, fingerprints []string) bool {
	return ca != nil && slices.Contains(fingerprints, Fingerprint(ca))
}

// withoutDistrusted drops the distrusted roots from c: a distrusted successor or retired root
// leaves the bundle, and a distrusted signing CA makes the store fail closed.
func withoutDistrusted(c content, err error, fingerprints []string) (content, error) {
	if len(fingerprints) == 0 {
		return c, err
	}
	if distrusted(c.next, fingerprints) {
		c.next = nil
	}
	c.retired = trustedRetired(c.retired, fingerprints)
	if err == nil && distrusted(c.signing, fingerprints) {
		return content{}, fmt.Errorf("%w: the signing CA %s is in discovery.ca.distrustedRoots", ErrCADistrusted, Fingerprint(c.signing))
	}
	return c, err
}

// withoutDistrustedSuccessor drops a distrusted successor from what the Secret holds before the
// rotation plan reads it, so that the plan never promotes it and prepares a fresh one in its
// place. It reports whether it dropped one.
func withoutDistrustedSuccessor(c content, fingerprints []string) (content, bool) {
	if !distrusted(c.next, fingerprints) {
		return c, false
	}
	c.next, c.nextActiveAt = nil, time.Time{}
	return c, true
}

// trustedRetired returns the retired roots that are not distrusted.
func trustedRetired(roots []pki.RetiredRoot, fingerprints []string) []pki.RetiredRoot {
	if len(fingerprints) == 0 {
		return roots
	}
	return slices.DeleteFunc(slices.Clone(roots), func(r pki.RetiredRoot) bool {
		sum := sha256.Sum256(r.Certificate.Raw)
		return slices.Contains(fingerprints, hex.EncodeToString(sum[:]))
	})
}
