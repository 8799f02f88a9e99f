package castore

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/discovery/pki/pkitest"
)

const proxyID = "spiffe://cluster.local/ns/coxswain-system/sa/coxswain-shared-proxy"

// signSVID signs a proxy SVID with ca at now through the production path.
func signSVID(t *testing.T, ca *pki.CA, now time.Time) *x509.Certificate {
	t.Helper()
	csr, err := x509.ParseCertificateRequest(pkitest.CSR(t))
	if err != nil {
		t.Fatal(err)
	}
	leaf, _, err := ca.SignSVID(csr, spiffeid.RequireFromString(proxyID), time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// verifies requires leaf to chain to bundle at now.
func verifies(t *testing.T, bundle *pki.Bundle, leaf *x509.Certificate, now time.Time) {
	t.Helper()
	_, err := leaf.Verify(x509.VerifyOptions{Roots: bundle.Pool(), CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		t.Fatalf("an SVID of a trusted root does not verify: %v", err)
	}
}
