package spiffe

import (
	"fmt"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

const (
	namespaceSegment      = "ns"
	serviceAccountSegment = "sa"
	usernamePrefix        = "system:serviceaccount:"

	maxLabelLength     = 63
	maxSubdomainLength = 253
)

// ServiceAccountID returns spiffe://<td>/ns/<namespace>/sa/<sa>.
func ServiceAccountID(td spiffeid.TrustDomain, namespace, sa string) (spiffeid.ID, error) {
	if td.IsZero() {
		return spiffeid.ID{}, fmt.Errorf("%w: empty", ErrInvalidTrustDomain)
	}
	if err := validateNames(namespace, sa); err != nil {
		return spiffeid.ID{}, err
	}
	id, err := spiffeid.FromSegments(td, namespaceSegment, namespace, serviceAccountSegment, sa)
	if err != nil {
		return spiffeid.ID{}, fmt.Errorf("%w: %w", ErrInvalidID, err)
	}
	return id, nil
}

// ParseServiceAccountID returns the namespace and ServiceAccount of an ID whose path is
// exactly /ns/<namespace>/sa/<sa>.
func ParseServiceAccountID(id spiffeid.ID) (namespace, sa string, err error) {
	segments := strings.Split(id.Path(), "/")
	if len(segments) != 5 || segments[0] != "" ||
		segments[1] != namespaceSegment || segments[3] != serviceAccountSegment {
		return "", "", fmt.Errorf("%w: %q", ErrNotServiceAccountID, id)
	}
	if err := validateNames(segments[2], segments[4]); err != nil {
		return "", "", err
	}
	return segments[2], segments[4], nil
}

// ServiceAccountFromUsername parses a TokenReview username of the form
// system:serviceaccount:<namespace>:<sa>.
func ServiceAccountFromUsername(username string) (namespace, sa string, err error) {
	rest, ok := strings.CutPrefix(username, usernamePrefix)
	if !ok {
		return "", "", fmt.Errorf("%w: %q", ErrNotServiceAccountUser, username)
	}
	namespace, sa, ok = strings.Cut(rest, ":")
	if !ok || strings.Contains(sa, ":") {
		return "", "", fmt.Errorf("%w: %q", ErrNotServiceAccountUser, username)
	}
	if err := validateNames(namespace, sa); err != nil {
		return "", "", err
	}
	return namespace, sa, nil
}

// validateNames checks a namespace (a DNS label) and a ServiceAccount name (a DNS subdomain).
func validateNames(namespace, sa string) error {
	if !isDNSLabel(namespace) {
		return fmt.Errorf("%w: namespace %q", ErrInvalidName, namespace)
	}
	if !isDNSSubdomain(sa) {
		return fmt.Errorf("%w: ServiceAccount %q", ErrInvalidName, sa)
	}
	return nil
}

// isDNSLabel reports whether s is an RFC 1123 label: 1..63 of [a-z0-9-], alphanumeric at both ends.
func isDNSLabel(s string) bool {
	if s == "" || len(s) > maxLabelLength || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := range len(s) {
		if !isLabelChar(s[i]) {
			return false
		}
	}
	return true
}

func isLabelChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-'
}

// isDNSSubdomain reports whether s is an RFC 1123 subdomain: dot-separated labels, at most 253 long.
func isDNSSubdomain(s string) bool {
	if s == "" || len(s) > maxSubdomainLength {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if !isDNSLabel(label) {
			return false
		}
	}
	return true
}
