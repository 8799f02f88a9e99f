package pki

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"math/big"
	"net/url"
	"slices"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"coxswain.dev/coxswain/discovery/spiffe"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// ClockSkew is how far NotBefore is backdated so that peers with slightly slow clocks accept
// a fresh certificate.
const ClockSkew = time.Minute

var serialLimit = new(big.Int).Lsh(big.NewInt(1), 128)

// SignSVID signs an X.509 SVID for the public key of a checked CSR (see CheckCSR). Everything
// the CSR asks for is ignored: the only SAN is id, the certificate is a leaf for digital
// signatures whose only extended key usage is client auth (a proxy never serves TLS with it),
// and it lives for ttl but never past the CA.
func (ca *CA) SignSVID(csr *x509.CertificateRequest, id spiffeid.ID, ttl time.Duration, now time.Time) (*x509.Certificate, []byte, error) {
	if csr == nil {
		return nil, nil, fmt.Errorf("%w: no CSR", ErrInvalidCSR)
	}
	if err := checkCSRKey(csr.PublicKey); err != nil {
		return nil, nil, err
	}
	return ca.issue(csr.PublicKey, id, nil, clientUsages, ttl, now)
}

// A proxy's SVID only ever authenticates a client; the controller's certificate serves.
var (
	clientUsages = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	serverUsages = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}
)

// IssueServerCert issues the controller's own serving certificate for pub: id as URI SAN plus
// dnsNames, usable for server and client auth, for ttl but never past the CA.
func (ca *CA) IssueServerCert(pub crypto.PublicKey, id spiffeid.ID, dnsNames []string, ttl time.Duration, now time.Time) (*x509.Certificate, []byte, error) {
	if err := checkCSRKey(pub); err != nil {
		return nil, nil, err
	}
	return ca.issue(pub, id, dnsNames, serverUsages, ttl, now)
}

func (ca *CA) issue(pub crypto.PublicKey, id spiffeid.ID, dnsNames []string, usages []x509.ExtKeyUsage, ttl time.Duration, now time.Time) (*x509.Certificate, []byte, error) {
	if ttl < wellknown.MinSVIDTTL || ttl > wellknown.MaxSVIDTTL {
		return nil, nil, fmt.Errorf("%w: ttl %s not in [%s, %s]", ErrInvalidLifetime, ttl, wellknown.MinSVIDTTL, wellknown.MaxSVIDTTL)
	}
	if err := ca.checkID(id); err != nil {
		return nil, nil, err
	}
	if err := ca.CheckValid(now); err != nil {
		return nil, nil, err
	}
	tmpl, err := ca.leafTemplate(id, dnsNames, usages, ttl, now)
	if err != nil {
		return nil, nil, err
	}
	cert, err := createCertificate(tmpl, ca.cert, pub, ca.signer)
	if err != nil {
		return nil, nil, fmt.Errorf("sign certificate for %s: %w", id, err)
	}
	return cert, cert.Raw, nil
}

// checkID requires a workload ID inside the CA's URI name constraints, when it has any.
func (ca *CA) checkID(id spiffeid.ID) error {
	if id.IsZero() {
		return fmt.Errorf("%w: empty", ErrInvalidID)
	}
	if err := spiffe.CheckID(id, id.TrustDomain()); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidID, err)
	}
	domains := ca.cert.PermittedURIDomains
	for _, d := range domains {
		if d == id.TrustDomain().Name() {
			return nil
		}
	}
	if len(domains) > 0 {
		return fmt.Errorf("%w: %s is outside the CA name constraints %q", ErrInvalidID, id, domains)
	}
	return nil
}

func (ca *CA) leafTemplate(id spiffeid.ID, dnsNames []string, usages []x509.ExtKeyUsage, ttl time.Duration, now time.Time) (*x509.Certificate, error) {
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	notBefore := now.Add(-ClockSkew)
	if notBefore.Before(ca.cert.NotBefore) {
		notBefore = ca.cert.NotBefore
	}
	notAfter := now.Add(ttl)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	return &x509.Certificate{
		SerialNumber:          serial,
		NotBefore:             notBefore.UTC(),
		NotAfter:              notAfter.UTC(),
		URIs:                  []*url.URL{id.URL()},
		DNSNames:              dnsNames,
		BasicConstraintsValid: true,
		IsCA:                  false,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           slices.Clone(usages),
	}, nil
}

// newSerial returns a random positive serial number of up to 128 bits.
func newSerial() (*big.Int, error) {
	for {
		n, err := rand.Int(rand.Reader, serialLimit)
		if err != nil {
			return nil, fmt.Errorf("generate serial number: %w", err)
		}
		if n.Sign() > 0 {
			return n, nil
		}
	}
}

func createCertificate(tmpl, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer) (*x509.Certificate, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}
