package tlsconfig

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"sync/atomic"

	"coxswain.dev/coxswain/discovery/pki"
)

var (
	// ErrNoCertificate reports a source that holds no certificate yet.
	ErrNoCertificate = errors.New("tlsconfig: no certificate available")
	// ErrNoBundle reports a source that holds no trust bundle yet.
	ErrNoBundle = errors.New("tlsconfig: no trust bundle available")
)

// CertificateSource yields the certificate to present; it is asked on every handshake.
type CertificateSource interface {
	Certificate() (*tls.Certificate, error)
}

// BundleSource yields the roots to verify peers against; it is asked on every handshake.
type BundleSource interface {
	Bundle() (*pki.Bundle, error)
}

// RotatingCertificate is a CertificateSource whose certificate can be swapped at any time.
// The zero value holds nothing and fails every handshake.
type RotatingCertificate struct {
	cert atomic.Pointer[tls.Certificate]
}

// NewRotatingCertificate returns a source holding cert, which may be nil.
func NewRotatingCertificate(cert *tls.Certificate) *RotatingCertificate {
	r := &RotatingCertificate{}
	r.Set(cert)
	return r
}

// Set replaces the certificate; later handshakes present it.
func (r *RotatingCertificate) Set(cert *tls.Certificate) { r.cert.Store(cert) }

// Certificate returns the current certificate or ErrNoCertificate.
func (r *RotatingCertificate) Certificate() (*tls.Certificate, error) {
	if c := r.cert.Load(); c != nil {
		return c, nil
	}
	return nil, ErrNoCertificate
}

// RotatingBundle is a BundleSource whose bundle can be swapped at any time. The zero value
// holds nothing and fails every handshake.
type RotatingBundle struct {
	bundle atomic.Pointer[pki.Bundle]
}

// NewRotatingBundle returns a source holding bundle, which may be nil.
func NewRotatingBundle(bundle *pki.Bundle) *RotatingBundle {
	r := &RotatingBundle{}
	r.Set(bundle)
	return r
}

// Set replaces the bundle; later handshakes verify against it.
func (r *RotatingBundle) Set(bundle *pki.Bundle) { r.bundle.Store(bundle) }

// Bundle returns the current bundle or ErrNoBundle.
func (r *RotatingBundle) Bundle() (*pki.Bundle, error) {
	if b := r.bundle.Load(); b != nil && b.Len() > 0 {
		return b, nil
	}
	return nil, ErrNoBundle
}

// NewCertificate assembles a TLS certificate from a key and its chain, leaf first.
func NewCertificate(key crypto.Signer, chain ...*x509.Certificate) *tls.Certificate {
	cert := &tls.Certificate{PrivateKey: key}
	for _, c := range chain {
		cert.Certificate = append(cert.Certificate, c.Raw)
	}
	if len(chain) > 0 {
		cert.Leaf = chain[0]
	}
	return cert
}
