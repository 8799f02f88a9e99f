package pkitest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"net/url"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"coxswain.dev/coxswain/discovery/pki"
)

// CALifetime is the lifetime of the CAs NewCA makes.
const CALifetime = 24 * time.Hour

// NewCA returns a fresh CA for trust domain td, valid from now for CALifetime.
func NewCA(t testing.TB, td string) *pki.CA {
	t.Helper()
	return NewCAAt(t, td, time.Now())
}

// NewCAAt returns a fresh CA for trust domain td, valid from now for CALifetime.
func NewCAAt(t testing.TB, td string, now time.Time) *pki.CA {
	t.Helper()
	domain, err := spiffeid.TrustDomainFromString(td)
	if err != nil {
		t.Fatalf("pkitest: trust domain %q: %v", td, err)
	}
	ca, err := pki.NewCA(domain, CALifetime, now)
	if err != nil {
		t.Fatalf("pkitest: new CA: %v", err)
	}
	return ca
}

// Bundle returns the trust bundle of the given CAs.
func Bundle(cas ...*pki.CA) *pki.Bundle {
	roots := make([]*x509.Certificate, 0, len(cas))
	for _, ca := range cas {
		roots = append(roots, ca.Certificate())
	}
	return pki.NewBundle(roots...)
}

// Option changes a certificate that Issue makes.
type Option func(*x509.Certificate)

// URIs sets the URI SANs; raw strings let tests write IDs that no real CA would sign.
func URIs(uris ...string) Option {
	return func(c *x509.Certificate) {
		c.URIs = nil
		for _, s := range uris {
			u, err := url.Parse(s)
			if err != nil {
				panic("pkitest: bad URI " + s)
			}
			c.URIs = append(c.URIs, u)
		}
	}
}

// DNSNames sets the DNS SANs.
func DNSNames(names ...string) Option {
	return func(c *x509.Certificate) { c.DNSNames = names }
}

// Validity sets NotBefore and NotAfter.
func Validity(notBefore, notAfter time.Time) Option {
	return func(c *x509.Certificate) { c.NotBefore, c.NotAfter = notBefore, notAfter }
}

// Expired makes a certificate that expired an hour ago.
func Expired() Option {
	now := time.Now()
	return Validity(now.Add(-2*time.Hour), now.Add(-time.Hour))
}

// NotYetValid makes a certificate valid only from an hour from now.
func NotYetValid() Option {
	now := time.Now()
	return Validity(now.Add(time.Hour), now.Add(2*time.Hour))
}

// AsCA marks the certificate as a CA.
func AsCA() Option {
	return func(c *x509.Certificate) {
		c.IsCA = true
		c.KeyUsage |= x509.KeyUsageCertSign
	}
}

// ExtKeyUsages replaces the extended key usages.
func ExtKeyUsages(usages ...x509.ExtKeyUsage) Option {
	return func(c *x509.Certificate) { c.ExtKeyUsage = usages }
}

// Issue signs a leaf with ca for a fresh ECDSA P-256 key, valid for an hour around now, usable
// for client and server auth, then applies opts. Without URIs it has no URI SAN.
func Issue(t testing.TB, ca *pki.CA, opts ...Option) *tls.Certificate {
	t.Helper()
	key := newKey(t)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(now.UnixNano()),
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(time.Hour),
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	for _, opt := range opts {
		opt(tmpl)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Certificate(), key.Public(), ca.Signer())
	if err != nil {
		t.Fatalf("pkitest: issue certificate: %v", err)
	}
	return tlsCertificate(t, der, key)
}

// SVID is Issue with the single URI SAN id.
func SVID(t testing.TB, ca *pki.CA, id string, opts ...Option) *tls.Certificate {
	t.Helper()
	return Issue(t, ca, append([]Option{URIs(id)}, opts...)...)
}

// SignedSVID returns an SVID for id signed through the production path, pki.CA.SignSVID.
func SignedSVID(t testing.TB, ca *pki.CA, id string) *tls.Certificate {
	t.Helper()
	key := newKey(t)
	csr, err := x509.ParseCertificateRequest(CSR(t, WithKey(key)))
	if err != nil {
		t.Fatalf("pkitest: parse CSR: %v", err)
	}
	_, der, err := ca.SignSVID(csr, spiffeid.RequireFromString(id), time.Hour, time.Now())
	if err != nil {
		t.Fatalf("pkitest: sign SVID: %v", err)
	}
	return tlsCertificate(t, der, key)
}

func tlsCertificate(t testing.TB, der []byte, key crypto.Signer) *tls.Certificate {
	t.Helper()
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("pkitest: parse certificate: %v", err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

func newKey(t testing.TB) crypto.Signer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("pkitest: generate key: %v", err)
	}
	return key
}
