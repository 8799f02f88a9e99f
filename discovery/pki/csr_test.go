package pki_test

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"testing"

	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/discovery/pki/pkitest"
)

func mustCSR(t *testing.T, opts ...pkitest.CSROption) *x509.CertificateRequest {
	t.Helper()
	csr, err := pki.CheckCSR(pkitest.CSR(t, opts...))
	if err != nil {
		t.Fatalf("CheckCSR: %v", err)
	}
	return csr
}

func TestCheckCSR(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		der     func(t *testing.T) []byte
		wantErr error
	}{
		{"an ECDSA P-256 CSR is accepted", csrOf(pkitest.WithKeyType(pkitest.P256)), nil},
		{"an ECDSA P-384 CSR is accepted", csrOf(pkitest.WithKeyType(pkitest.P384)), nil},
		{"an Ed25519 CSR is accepted", csrOf(pkitest.WithKeyType(pkitest.Ed25519)), nil},
		{"an RSA-2048 CSR is accepted", csrOf(pkitest.WithKeyType(pkitest.RSA2048)), nil},
		{"a CSR asking for IsCA passes the check, to be signed as a leaf", csrOf(pkitest.RequestCA()), nil},
		{"an RSA-1024 CSR is rejected", csrOf(pkitest.WithKeyType(pkitest.RSA1024)), pki.ErrUnsupportedKey},
		{"an ECDSA P-521 CSR is rejected", csrOf(pkitest.WithKeyType(pkitest.P521)), pki.ErrUnsupportedKey},
		{"an ECDSA P-224 CSR is rejected", csrOf(pkitest.WithKeyType(pkitest.P224)), pki.ErrUnsupportedKey},
		{"a CSR with a corrupted signature is rejected", csrOf(pkitest.CorruptSignature()), pki.ErrInvalidCSR},
		{"an Ed25519 CSR with a corrupted signature is rejected", csrOf(pkitest.WithKeyType(pkitest.Ed25519), pkitest.CorruptSignature()), pki.ErrInvalidCSR},
		{"an oversized CSR is rejected", csrOf(pkitest.RequestDNSNames(manyNames()...)), pki.ErrCSRTooLarge},
		{"garbage is rejected", func(*testing.T) []byte { return []byte("not a CSR") }, pki.ErrInvalidCSR},
		{"nothing is rejected", func(*testing.T) []byte { return nil }, pki.ErrInvalidCSR},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := pki.CheckCSR(tt.der(t))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("CheckCSR error = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func csrOf(opts ...pkitest.CSROption) func(t *testing.T) []byte {
	return func(t *testing.T) []byte { return pkitest.CSR(t, opts...) }
}

func manyNames() []string {
	names := make([]string, 400)
	for i := range names {
		names[i] = strings.Repeat("a", 40) + ".example.com"
	}
	return names
}

func TestCheckCSRPEM(t *testing.T) {
	t.Parallel()
	der := pkitest.CSR(t)
	good := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	if _, err := pki.CheckCSRPEM(good); err != nil {
		t.Fatalf("CheckCSRPEM: %v", err)
	}
	wrongType := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if _, err := pki.CheckCSRPEM(wrongType); !errors.Is(err, pki.ErrInvalidCSR) {
		t.Fatalf("a CERTIFICATE block: error = %v, want ErrInvalidCSR", err)
	}
	huge := bytes.Repeat([]byte("A"), 3*pki.MaxCSRBytes)
	if _, err := pki.CheckCSRPEM(huge); !errors.Is(err, pki.ErrCSRTooLarge) {
		t.Fatalf("huge PEM: error = %v, want ErrCSRTooLarge", err)
	}
}
