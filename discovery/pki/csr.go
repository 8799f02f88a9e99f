package pki

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
)

// MaxCSRBytes bounds the DER size of a CSR; an RSA-8192 CSR with a few names fits well inside.
const MaxCSRBytes = 16 << 10

// csrSignatureAlgorithms are the self-signature algorithms a CSR may use.
var csrSignatureAlgorithms = map[x509.SignatureAlgorithm]bool{
	x509.SHA256WithRSA:    true,
	x509.SHA384WithRSA:    true,
	x509.SHA512WithRSA:    true,
	x509.SHA256WithRSAPSS: true,
	x509.SHA384WithRSAPSS: true,
	x509.SHA512WithRSAPSS: true,
	x509.ECDSAWithSHA256:  true,
	x509.ECDSAWithSHA384:  true,
	x509.ECDSAWithSHA512:  true,
	x509.PureEd25519:      true,
}

// CheckCSR parses a DER CSR of at most MaxCSRBytes, verifies its self-signature, and checks
// the key against the allowlist: ECDSA P-256/P-384, Ed25519, RSA 2048..8192. The names and
// extensions the CSR asks for are left for SignSVID to ignore.
func CheckCSR(der []byte) (*x509.CertificateRequest, error) {
	if len(der) > MaxCSRBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrCSRTooLarge, len(der), MaxCSRBytes)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidCSR, err)
	}
	if !csrSignatureAlgorithms[csr.SignatureAlgorithm] {
		return nil, fmt.Errorf("%w: signature algorithm %s", ErrInvalidCSR, csr.SignatureAlgorithm)
	}
	if err := checkCSRKey(csr.PublicKey); err != nil {
		return nil, err
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidCSR, err)
	}
	return csr, nil
}

// CheckCSRPEM is CheckCSR over a single PEM "CERTIFICATE REQUEST" block.
func CheckCSRPEM(data []byte) (*x509.CertificateRequest, error) {
	if len(data) > 2*MaxCSRBytes {
		return nil, fmt.Errorf("%w: %d PEM bytes", ErrCSRTooLarge, len(data))
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("%w: no CERTIFICATE REQUEST PEM block", ErrInvalidCSR)
	}
	return CheckCSR(block.Bytes)
}
