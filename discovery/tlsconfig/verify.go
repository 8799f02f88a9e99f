package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"coxswain.dev/coxswain/discovery/spiffe"
)

// ErrUnauthorized reports a verified peer whose SPIFFE ID the authorizer refused.
var ErrUnauthorized = errors.New("tlsconfig: peer not authorized")

// Authorizer decides whether a verified peer ID may connect; it returns an error to refuse.
type Authorizer func(id spiffeid.ID) error

// AuthorizeAny accepts every workload ID of the trust domain.
func AuthorizeAny() Authorizer {
	return func(spiffeid.ID) error { return nil }
}

// AuthorizeID accepts exactly want.
func AuthorizeID(want spiffeid.ID) Authorizer {
	return func(id spiffeid.ID) error {
		if id != want {
			return fmt.Errorf("%w: %s, want %s", ErrUnauthorized, id, want)
		}
		return nil
	}
}

// AuthorizeServiceAccount accepts the SPIFFE ID of ServiceAccount namespace/sa in any trust
// domain: for a proxy's first bootstrap, before an SVID tells it the trust domain (the bundle's
// CA, name-constrained to the trust domain in Auto mode, bounds which one).
func AuthorizeServiceAccount(namespace, sa string) Authorizer {
	path := "/ns/" + namespace + "/sa/" + sa
	return func(id spiffeid.ID) error {
		if id.Path() != path {
			return fmt.Errorf("%w: %s, want the path %s", ErrUnauthorized, id, path)
		}
		return nil
	}
}

// verifyChain verifies the peer chain against the current bundle for usage at now.
func verifyChain(chain []*x509.Certificate, bundles BundleSource, usage x509.ExtKeyUsage, dnsName string, now time.Time) error {
	if len(chain) == 0 {
		return spiffe.ErrNoCertificate
	}
	bundle, err := bundles.Bundle()
	if err != nil {
		return err
	}
	opts := x509.VerifyOptions{
		Roots:         bundle.Pool(),
		Intermediates: x509.NewCertPool(),
		CurrentTime:   now,
		DNSName:       dnsName,
		KeyUsages:     []x509.ExtKeyUsage{usage},
	}
	for _, c := range chain[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := chain[0].Verify(opts); err != nil {
		return err
	}
	return nil
}

// spiffePeerVerifier returns a VerifyConnection hook that verifies the peer chain against the
// current bundle, extracts its SPIFFE ID in td and asks authorize.
func spiffePeerVerifier(bundles BundleSource, td spiffeid.TrustDomain, usage x509.ExtKeyUsage, authorize Authorizer) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if err := verifyChain(cs.PeerCertificates, bundles, usage, "", time.Now()); err != nil {
			return fmt.Errorf("tlsconfig: verify peer: %w", err)
		}
		id, err := spiffe.PeerIDFromChain(cs.PeerCertificates, td)
		if err != nil {
			return fmt.Errorf("tlsconfig: peer identity: %w", err)
		}
		if err := authorize(id); err != nil {
			return fmt.Errorf("tlsconfig: authorize %s: %w", id, err)
		}
		return nil
	}
}

// getCertificate adapts a CertificateSource to the server and client hooks.
func getCertificate(certs CertificateSource) (*tls.Certificate, error) {
	cert, err := certs.Certificate()
	if err != nil {
		return nil, fmt.Errorf("tlsconfig: load certificate: %w", err)
	}
	return cert, nil
}
