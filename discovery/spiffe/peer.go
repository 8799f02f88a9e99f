package spiffe

import (
	"crypto/x509"
	"fmt"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// PeerID returns the SPIFFE ID a workload certificate authenticates. The certificate must be
// a leaf with exactly one URI SAN holding a valid SPIFFE ID with a non-empty path in td.
// PeerID does not verify the chain; call it after chain verification.
func PeerID(leaf *x509.Certificate, td spiffeid.TrustDomain) (spiffeid.ID, error) {
	if leaf == nil {
		return spiffeid.ID{}, ErrNoCertificate
	}
	if leaf.IsCA {
		return spiffeid.ID{}, ErrCACertificate
	}
	switch len(leaf.URIs) {
	case 0:
		return spiffeid.ID{}, ErrNoURISAN
	case 1:
	default:
		return spiffeid.ID{}, fmt.Errorf("%w: %d URI SANs", ErrMultipleURISANs, len(leaf.URIs))
	}
	id, err := spiffeid.FromURI(leaf.URIs[0])
	if err != nil {
		return spiffeid.ID{}, fmt.Errorf("%w: %w", ErrInvalidID, err)
	}
	if err := CheckID(id, td); err != nil {
		return spiffeid.ID{}, err
	}
	return id, nil
}

// PeerIDFromChain is PeerID over the first certificate of a verified peer chain, as found in
// tls.ConnectionState.PeerCertificates; an empty chain is ErrNoCertificate.
func PeerIDFromChain(chain []*x509.Certificate, td spiffeid.TrustDomain) (spiffeid.ID, error) {
	if len(chain) == 0 {
		return spiffeid.ID{}, ErrNoCertificate
	}
	return PeerID(chain[0], td)
}

// CheckID requires id to be a workload ID of td: a member of td with a non-empty path.
func CheckID(id spiffeid.ID, td spiffeid.TrustDomain) error {
	if id.IsZero() {
		return fmt.Errorf("%w: empty", ErrInvalidID)
	}
	if td.IsZero() || !id.MemberOf(td) {
		return fmt.Errorf("%w: %q is not in %q", ErrForeignTrustDomain, id, td)
	}
	if id.Path() == "" {
		return fmt.Errorf("%w: %q", ErrEmptyPath, id)
	}
	return nil
}
