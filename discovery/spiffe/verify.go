package spiffe

import (
	"crypto/x509"
	"fmt"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
)

// Verify verifies a peer chain, leaf first, with go-spiffe's x509svid.Verify against the roots
// bundles holds for the leaf's trust domain, and returns the leaf's SPIFFE ID and the verified
// chains. go-spiffe requires exactly one URI SAN holding a SPIFFE ID and a leaf that is no CA,
// and verifies the chain for any extended key usage: check the usage (CheckExtKeyUsage), the
// trust domain and the path (CheckID) on top. A refusal of the SAN or of a CA leaf carries
// ErrNoURISAN, ErrMultipleURISANs, ErrInvalidID or ErrCACertificate beside go-spiffe's error; a
// chain that does not verify keeps the x509 error in its chain.
func Verify(chain []*x509.Certificate, bundles x509bundle.Source, opts ...x509svid.VerifyOption) (spiffeid.ID, [][]*x509.Certificate, error) {
	if len(chain) == 0 {
		return spiffeid.ID{}, nil, ErrNoCertificate
	}
	id, verified, err := x509svid.Verify(chain, bundles, opts...)
	if err != nil {
		return spiffeid.ID{}, nil, classify(chain[0], err)
	}
	return id, verified, nil
}

// classify adds the sentinel of the leaf's defect to go-spiffe's refusal, which names none.
func classify(leaf *x509.Certificate, err error) error {
	if _, idErr := x509svid.IDFromCert(leaf); idErr != nil {
		return uriError(leaf, err)
	}
	if leaf.IsCA || leaf.KeyUsage&(x509.KeyUsageCertSign|x509.KeyUsageCRLSign) != 0 {
		return fmt.Errorf("%w: %w", ErrCACertificate, err)
	}
	return err
}

// uriError names why go-spiffe found no SPIFFE ID in leaf.
func uriError(leaf *x509.Certificate, err error) error {
	switch len(leaf.URIs) {
	case 0:
		return fmt.Errorf("%w: %w", ErrNoURISAN, err)
	case 1:
		return fmt.Errorf("%w: %w", ErrInvalidID, err)
	default:
		return fmt.Errorf("%w: %d URI SANs: %w", ErrMultipleURISANs, len(leaf.URIs), err)
	}
}

// CheckExtKeyUsage requires one of the verified chains to allow usage, as crypto/x509 decides
// it: every certificate of the chain either names no extended key usage, or names usage or any
// usage. go-spiffe verifies for any usage; this keeps a proxy's client-only SVID from serving and
// the controller's serving certificate from being presented as a client.
func CheckExtKeyUsage(verified [][]*x509.Certificate, usage x509.ExtKeyUsage) error {
	for _, chain := range verified {
		if chainAllows(chain, usage) {
			return nil
		}
	}
	var leaf *x509.Certificate
	if len(verified) > 0 && len(verified[0]) > 0 {
		leaf = verified[0][0]
	}
	return x509.CertificateInvalidError{Cert: leaf, Reason: x509.IncompatibleUsage}
}

func chainAllows(chain []*x509.Certificate, usage x509.ExtKeyUsage) bool {
	if len(chain) == 0 {
		return false
	}
	for _, c := range chain {
		if !certificateAllows(c, usage) {
			return false
		}
	}
	return true
}

func certificateAllows(c *x509.Certificate, usage x509.ExtKeyUsage) bool {
	if len(c.ExtKeyUsage) == 0 && len(c.UnknownExtKeyUsage) == 0 {
		return true
	}
	for _, u := range c.ExtKeyUsage {
		if u == usage || u == x509.ExtKeyUsageAny {
			return true
		}
	}
	return false
}
