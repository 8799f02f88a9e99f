package pki

import "errors"

// Sentinel errors, checked with errors.Is.
var (
	// ErrInvalidLifetime reports a CA or certificate lifetime outside its bounds.
	ErrInvalidLifetime = errors.New("pki: lifetime out of bounds")
	// ErrNoCertificate reports PEM without a CERTIFICATE block.
	ErrNoCertificate = errors.New("pki: no certificate")
	// ErrNoKey reports PEM without a private key block.
	ErrNoKey = errors.New("pki: no private key")
	// ErrNotCA reports a certificate that cannot act as a CA.
	ErrNotCA = errors.New("pki: certificate is not a CA")
	// ErrKeyMismatch reports a private key that does not belong to the certificate.
	ErrKeyMismatch = errors.New("pki: private key does not match certificate")
	// ErrUnsupportedKey reports a key algorithm or size outside the allowlist.
	ErrUnsupportedKey = errors.New("pki: unsupported key")
	// ErrCAExpired reports a CA used outside its validity period.
	ErrCAExpired = errors.New("pki: CA is expired or not yet valid")
	// ErrCSRTooLarge reports a CSR longer than MaxCSRBytes.
	ErrCSRTooLarge = errors.New("pki: CSR too large")
	// ErrInvalidCSR reports a CSR that does not parse or whose signature does not verify.
	ErrInvalidCSR = errors.New("pki: invalid CSR")
	// ErrInvalidID reports a SPIFFE ID that a certificate may not carry.
	ErrInvalidID = errors.New("pki: invalid SPIFFE ID")
)
