package spiffe

import (
	"crypto/x509"
	"fmt"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
)

// PeerID returns the SPIFFE ID a workload certificate authenticates. The certificate must be
// a leaf with exactly one URI SAN holding a valid SPIFFE ID (go-spiffe's x509svid.IDFromCert)
// with a non-empty path in td. PeerID does not verify the chain; call it after chain
// verification, or call Verify.
func PeerID(leaf *x509.Certificate, td spiffeid.TrustDomain) (spiffeid.ID, error) {
	if leaf == nil {
		return spiffeid.ID{}, ErrNoCertificate
	}
	if leaf.IsCA {
		return spiffeid.ID{}, ErrCACertificate
	}
	id, err := x509svid.IDFromCert(leaf)
	if err != nil {
		return spiffeid.ID{}, uriError(leaf, err)
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

// CheckID requires id to be a workload ID of td: a member of td (go-spiffe's
// spiffeid.MatchMemberOf) with a non-empty path, which go-spiffe does not require.
func CheckID(id spiffeid.ID, td spiffeid.TrustDomain) error {
	if id.IsZero() {
		return fmt.Errorf("%w: empty", ErrInvalidID)
	}
	if err := spiffeid.MatchMemberOf(td)(id); err != nil || td.IsZero() {
		return fmt.Errorf("%w: %q is not in %q", ErrForeignTrustDomain, id, td)
	}
	return CheckPath(id)
}

// CheckPath requires id to have a path: a SPIFFE ID without one names a trust domain, not a
// workload, and go-spiffe accepts it.
func CheckPath(id spiffeid.ID) error {
	if id.Path() == "" {
		return fmt.Errorf("%w: %q", ErrEmptyPath, id)
	}
	return nil
}
