package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	spiffetls "github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"

	"coxswain.dev/coxswain/discovery/spiffe"
)

// ErrUnauthorized reports a verified peer whose SPIFFE ID the authorizer refused.
var ErrUnauthorized = errors.New("tlsconfig: peer not authorized")

// Authorizer is go-spiffe's: it decides whether a peer, verified by x509svid.Verify, may
// connect, given its SPIFFE ID and verified chains, and returns an error to refuse. Any
// go-spiffe authorizer fits.
type Authorizer = spiffetls.Authorizer

// AuthorizeAny accepts every peer (go-spiffe's AuthorizeAny). The configs of this package still
// apply their own rules first.
func AuthorizeAny() Authorizer { return spiffetls.AuthorizeAny() }

// AuthorizeID accepts exactly want (go-spiffe's AuthorizeID); a refusal is ErrUnauthorized.
func AuthorizeID(want spiffeid.ID) Authorizer { return unauthorized(spiffetls.AuthorizeID(want)) }

// AuthorizeServiceAccount accepts the SPIFFE ID of ServiceAccount namespace/sa in any trust
// domain: for a proxy's first bootstrap, before an SVID tells it the trust domain (the bundle's
// CA, name-constrained to the trust domain in Auto mode, bounds which one). A refusal is
// ErrUnauthorized.
func AuthorizeServiceAccount(namespace, sa string) Authorizer {
	path := "/ns/" + namespace + "/sa/" + sa
	return unauthorized(spiffetls.AdaptMatcher(func(id spiffeid.ID) error {
		if id.Path() != path {
			return fmt.Errorf("%s, want the path %s", id, path)
		}
		return nil
	}))
}

// AuthorizeMemberOf accepts the IDs of td (go-spiffe's AuthorizeMemberOf); a refusal is
// spiffe.ErrForeignTrustDomain.
func AuthorizeMemberOf(td spiffeid.TrustDomain) Authorizer {
	member := spiffetls.AuthorizeMemberOf(td)
	return func(id spiffeid.ID, verified [][]*x509.Certificate) error {
		if err := member(id, verified); err != nil {
			return fmt.Errorf("%w: %w", spiffe.ErrForeignTrustDomain, err)
		}
		return nil
	}
}

// AuthorizeWorkload refuses a SPIFFE ID with an empty path (spiffe.ErrEmptyPath), which names a
// trust domain rather than a workload and which go-spiffe accepts.
func AuthorizeWorkload() Authorizer {
	return spiffetls.AdaptMatcher(spiffe.CheckPath)
}

// AuthorizeExtKeyUsage requires a verified chain that allows usage (spiffe.CheckExtKeyUsage):
// go-spiffe verifies for any usage, and this keeps each certificate to its direction. A refusal
// is an x509.CertificateInvalidError with the reason x509.IncompatibleUsage.
func AuthorizeExtKeyUsage(usage x509.ExtKeyUsage) Authorizer {
	return func(_ spiffeid.ID, verified [][]*x509.Certificate) error {
		return spiffe.CheckExtKeyUsage(verified, usage)
	}
}

// AuthorizeDNSName requires the verified leaf to carry name as a DNS SAN; a refusal is an
// x509.HostnameError.
func AuthorizeDNSName(name string) Authorizer {
	return func(_ spiffeid.ID, verified [][]*x509.Certificate) error {
		if len(verified) == 0 || len(verified[0]) == 0 {
			return spiffe.ErrNoCertificate
		}
		return verified[0][0].VerifyHostname(name)
	}
}

// AuthorizeAll runs each authorizer in order and returns the first refusal.
func AuthorizeAll(authorizers ...Authorizer) Authorizer {
	return func(id spiffeid.ID, verified [][]*x509.Certificate) error {
		for _, authorize := range authorizers {
			if err := authorize(id, verified); err != nil {
				return err
			}
		}
		return nil
	}
}

// unauthorized marks every refusal of authorize as ErrUnauthorized.
func unauthorized(authorize Authorizer) Authorizer {
	return func(id spiffeid.ID, verified [][]*x509.Certificate) error {
		if err := authorize(id, verified); err != nil {
			return fmt.Errorf("%w: %w", ErrUnauthorized, err)
		}
		return nil
	}
}

// X509Source offers the roots bundles holds at each call as go-spiffe's x509bundle.Source. The
// bundle is one set of roots, not a set per trust domain: it is offered for whatever trust
// domain the peer's ID names, the peer's trust domain is decided by an authorizer
// (AuthorizeMemberOf on the stream; the controller's exact ID once the proxy knows its trust
// domain), and a root's URI name constraint refuses IDs outside its own.
func X509Source(bundles BundleSource) x509bundle.Source { return x509Source{bundles} }

type x509Source struct{ bundles BundleSource }

func (s x509Source) GetX509BundleForTrustDomain(td spiffeid.TrustDomain) (*x509bundle.Bundle, error) {
	bundle, err := s.bundles.Bundle()
	if err != nil {
		return nil, err
	}
	return bundle.X509Bundle(td), nil
}

// peerVerifier returns a VerifyConnection hook: the peer chain verified by go-spiffe against the
// bundle of the moment (spiffe.Verify), then authorize. It runs on every handshake, resumed ones
// included, which go-spiffe's VerifyPeerCertificate hooks do not.
func peerVerifier(bundles BundleSource, authorize Authorizer) func(tls.ConnectionState) error {
	source := X509Source(bundles)
	return func(cs tls.ConnectionState) error {
		id, verified, err := spiffe.Verify(cs.PeerCertificates, source)
		if err != nil {
			return fmt.Errorf("tlsconfig: verify peer: %w", err)
		}
		if err := authorize(id, verified); err != nil {
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
