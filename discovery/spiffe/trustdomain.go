package spiffe

import (
	"fmt"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// MaxTrustDomainLength bounds a trust domain name, as the SPIFFE specification recommends.
const MaxTrustDomainLength = 255

// ParseTrustDomain parses a bare trust domain name such as "cluster.local". Only lowercase
// letters, digits, '.', '-' and '_' are allowed; the spiffe:// form is refused.
func ParseTrustDomain(name string) (spiffeid.TrustDomain, error) {
	if name == "" || len(name) > MaxTrustDomainLength {
		return spiffeid.TrustDomain{}, fmt.Errorf("%w: length of %q must be 1..%d", ErrInvalidTrustDomain, name, MaxTrustDomainLength)
	}
	for i := range len(name) {
		if !isTrustDomainChar(name[i]) {
			return spiffeid.TrustDomain{}, fmt.Errorf("%w: %q has character %q", ErrInvalidTrustDomain, name, name[i])
		}
	}
	td, err := spiffeid.TrustDomainFromString(name)
	if err != nil {
		return spiffeid.TrustDomain{}, fmt.Errorf("%w: %w", ErrInvalidTrustDomain, err)
	}
	return td, nil
}

func isTrustDomainChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		return true
	default:
		return c == '.' || c == '-' || c == '_'
	}
}
