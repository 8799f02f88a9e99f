package pki

import (
	"bytes"
	"cmp"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// MaxBundleBytes bounds the PEM size of a trust bundle.
const MaxBundleBytes = 1 << 20

// Bundle is an immutable set of trusted root certificates, ordered by NotBefore then DER.
type Bundle struct {
	roots []*x509.Certificate
}

// NewBundle returns the bundle of roots, without duplicates, in canonical order.
func NewBundle(roots ...*x509.Certificate) *Bundle {
	sorted := slices.Clone(roots)
	slices.SortFunc(sorted, compareCertificates)
	sorted = slices.CompactFunc(sorted, func(a, b *x509.Certificate) bool {
		return bytes.Equal(a.Raw, b.Raw)
	})
	return &Bundle{roots: sorted}
}

func compareCertificates(a, b *x509.Certificate) int {
	return cmp.Or(a.NotBefore.Compare(b.NotBefore), bytes.Compare(a.Raw, b.Raw))
}

// ParseBundlePEM parses the CERTIFICATE blocks of data into a bundle. Every root must be a
// CA; a bundle without roots is an error.
func ParseBundlePEM(data []byte) (*Bundle, error) {
	if len(data) > MaxBundleBytes {
		return nil, fmt.Errorf("parse trust bundle: %d bytes, limit %d", len(data), MaxBundleBytes)
	}
	var roots []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != pemCertificate {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse trust bundle: %w", err)
		}
		if err := checkCACertificate(cert); err != nil {
			return nil, fmt.Errorf("parse trust bundle: root %q: %w", cert.Subject, err)
		}
		roots = append(roots, cert)
	}
	if len(roots) == 0 {
		return nil, fmt.Errorf("parse trust bundle: %w", ErrNoCertificate)
	}
	return NewBundle(roots...), nil
}

// Certificates returns a copy of the roots in canonical order.
func (b *Bundle) Certificates() []*x509.Certificate { return slices.Clone(b.roots) }

// Len returns the number of roots.
func (b *Bundle) Len() int { return len(b.roots) }

// Contains reports whether cert is one of the roots.
func (b *Bundle) Contains(cert *x509.Certificate) bool {
	return slices.ContainsFunc(b.roots, func(r *x509.Certificate) bool { return bytes.Equal(r.Raw, cert.Raw) })
}

// PEM encodes the roots in canonical order, so equal bundles give equal bytes.
func (b *Bundle) PEM() []byte {
	var buf bytes.Buffer
	for _, r := range b.roots {
		_ = pem.Encode(&buf, &pem.Block{Type: pemCertificate, Bytes: r.Raw}) // writes to a bytes.Buffer cannot fail
	}
	return buf.Bytes()
}

// Pool returns a fresh certificate pool holding the roots.
func (b *Bundle) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	for _, r := range b.roots {
		pool.AddCert(r)
	}
	return pool
}

// X509Bundle returns the roots as go-spiffe's bundle of td, for x509svid verification. The roots
// carry no trust domain of their own: td is the caller's claim (a root's URI name constraint, in
// Auto mode, is what binds it to one).
func (b *Bundle) X509Bundle(td spiffeid.TrustDomain) *x509bundle.Bundle {
	return x509bundle.FromX509Authorities(td, b.roots)
}

// Equal reports whether b and other hold the same roots.
func (b *Bundle) Equal(other *Bundle) bool {
	return slices.EqualFunc(b.roots, other.roots, func(x, y *x509.Certificate) bool { return bytes.Equal(x.Raw, y.Raw) })
}
