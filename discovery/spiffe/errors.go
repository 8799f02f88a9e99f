package spiffe

import "errors"

// Sentinel errors, checked with errors.Is.
var (
	// ErrInvalidTrustDomain reports a trust domain name outside the SPIFFE charset.
	ErrInvalidTrustDomain = errors.New("spiffe: invalid trust domain")
	// ErrInvalidID reports a URI that is not a valid SPIFFE ID.
	ErrInvalidID = errors.New("spiffe: invalid SPIFFE ID")
	// ErrNotServiceAccountID reports a SPIFFE ID whose path is not /ns/<ns>/sa/<sa>.
	ErrNotServiceAccountID = errors.New("spiffe: not a ServiceAccount SPIFFE ID")
	// ErrInvalidName reports a namespace or ServiceAccount name that Kubernetes would refuse.
	ErrInvalidName = errors.New("spiffe: invalid Kubernetes name")
	// ErrNotServiceAccountUser reports a username that is not system:serviceaccount:<ns>:<sa>.
	ErrNotServiceAccountUser = errors.New("spiffe: not a ServiceAccount username")
	// ErrNoCertificate reports a peer that presented no certificate.
	ErrNoCertificate = errors.New("spiffe: no peer certificate")
	// ErrNoURISAN reports a certificate without a URI SAN.
	ErrNoURISAN = errors.New("spiffe: certificate has no URI SAN")
	// ErrMultipleURISANs reports a certificate with more than one URI SAN.
	ErrMultipleURISANs = errors.New("spiffe: certificate has more than one URI SAN")
	// ErrForeignTrustDomain reports a SPIFFE ID outside the expected trust domain.
	ErrForeignTrustDomain = errors.New("spiffe: SPIFFE ID in a foreign trust domain")
	// ErrEmptyPath reports a SPIFFE ID without a path, which names no workload.
	ErrEmptyPath = errors.New("spiffe: SPIFFE ID has an empty path")
	// ErrCACertificate reports a CA certificate presented as a workload certificate.
	ErrCACertificate = errors.New("spiffe: CA certificate used as a leaf")
)
