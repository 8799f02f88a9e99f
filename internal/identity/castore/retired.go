package castore

import (
	"bytes"
	"crypto/x509"
	"slices"
	"time"

	"coxswain.dev/coxswain/discovery/pki"
)

// retire adds cert to roots as retired with its leaves live until until, capped at the root's own
// expiry; a root already there keeps the later of the two times.
func retire(roots []pki.RetiredRoot, cert *x509.Certificate, until time.Time) []pki.RetiredRoot {
	if cert.NotAfter.Before(until) {
		until = cert.NotAfter
	}
	return mergeRetired(roots, pki.RetiredRoot{Certificate: cert, LastLeafExpiry: until})
}

// mergeRetired returns roots with more added; a root in both keeps the later expiry.
func mergeRetired(roots []pki.RetiredRoot, more ...pki.RetiredRoot) []pki.RetiredRoot {
	out := slices.Clone(roots)
	for _, m := range more {
		i := slices.IndexFunc(out, func(r pki.RetiredRoot) bool { return bytes.Equal(r.Certificate.Raw, m.Certificate.Raw) })
		switch {
		case i < 0:
			out = append(out, m)
		case m.LastLeafExpiry.After(out[i].LastLeafExpiry):
			out[i].LastLeafExpiry = m.LastLeafExpiry
		}
	}
	return out
}

// pruneRetired drops the roots whose leaves have all expired at now and the roots in keep,
// which sign or are about to.
func pruneRetired(roots []pki.RetiredRoot, now time.Time, keep ...*x509.Certificate) []pki.RetiredRoot {
	return slices.DeleteFunc(slices.Clone(roots), func(r pki.RetiredRoot) bool {
		if !live(r, now) {
			return true
		}
		return slices.ContainsFunc(keep, func(k *x509.Certificate) bool { return k != nil && bytes.Equal(k.Raw, r.Certificate.Raw) })
	})
}

// bundleOf is the trust bundle at now: the signing root, the successor and the live retired roots.
func bundleOf(signing, next *x509.Certificate, retired []pki.RetiredRoot, now time.Time) *pki.Bundle {
	roots := pki.PublishRoots(signing, retired, now).Certificates()
	if next != nil {
		roots = append(roots, next)
	}
	return pki.NewBundle(roots...)
}
