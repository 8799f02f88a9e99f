package pki_test

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"coxswain.dev/coxswain/discovery/pki"
)

var (
	td    = spiffeid.RequireTrustDomainFromString("cluster.local")
	epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
)

func newCA(t *testing.T) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA(td, 365*24*time.Hour, epoch)
	if err != nil {
		t.Fatalf("NewCA: %v", err)
	}
	return ca
}

func TestNewCA(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	cert := ca.Certificate()
	type shape struct {
		IsCA, BasicConstraintsValid, MaxPathLenZero bool
		MaxPathLen                                  int
		KeyUsage                                    x509.KeyUsage
		PermittedURIDomains                         []string
		NotBefore, NotAfter                         time.Time
		Curve                                       string
		SelfSigned                                  bool
	}
	got := shape{
		IsCA: cert.IsCA, BasicConstraintsValid: cert.BasicConstraintsValid, MaxPathLenZero: cert.MaxPathLenZero,
		MaxPathLen: cert.MaxPathLen, KeyUsage: cert.KeyUsage, PermittedURIDomains: cert.PermittedURIDomains,
		NotBefore: cert.NotBefore, NotAfter: cert.NotAfter,
		Curve:      cert.PublicKey.(*ecdsa.PublicKey).Curve.Params().Name,
		SelfSigned: cert.CheckSignatureFrom(cert) == nil,
	}
	want := shape{
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true, MaxPathLen: 0,
		KeyUsage:            x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		PermittedURIDomains: []string{"cluster.local"},
		NotBefore:           epoch.Add(-pki.ClockSkew), NotAfter: epoch.Add(365 * 24 * time.Hour),
		Curve: "P-256", SelfSigned: true,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("CA certificate (-want +got):\n%s", diff)
	}
	if !nameConstraintsCritical(cert) {
		t.Fatal("name constraints extension is not critical")
	}
}

func nameConstraintsCritical(cert *x509.Certificate) bool {
	for _, ext := range cert.Extensions {
		if ext.Id.Equal(asn1.ObjectIdentifier{2, 5, 29, 30}) {
			return ext.Critical
		}
	}
	return false
}

func TestNewCARejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		td       spiffeid.TrustDomain
		lifetime time.Duration
		wantErr  error
	}{
		{"a zero trust domain is rejected", spiffeid.TrustDomain{}, 24 * time.Hour, pki.ErrInvalidID},
		{"a lifetime under an hour is rejected", td, time.Minute, pki.ErrInvalidLifetime},
		{"a negative lifetime is rejected", td, -time.Hour, pki.ErrInvalidLifetime},
		{"a lifetime over ten years is rejected", td, 11 * 365 * 24 * time.Hour, pki.ErrInvalidLifetime},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := pki.NewCA(tt.td, tt.lifetime, epoch); !errors.Is(err, tt.wantErr) {
				t.Fatalf("NewCA error = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

// selfSigned makes a self-signed certificate for key from tmpl fields.
func selfSigned(t *testing.T, key crypto.Signer, isCA bool, usage x509.KeyUsage) *x509.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(7),
		Subject:               pkix.Name{CommonName: "coxswain-discovery-ca"},
		NotBefore:             epoch,
		NotAfter:              epoch.Add(24 * time.Hour),
		BasicConstraintsValid: true,
		IsCA:                  isCA,
		KeyUsage:              usage,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatalf("create certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("parse certificate: %v", err)
	}
	return cert
}

func certPEM(certs ...*x509.Certificate) []byte {
	var buf bytes.Buffer
	for _, c := range certs {
		_ = pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return buf.Bytes()
}

func keyPEM(t *testing.T, key crypto.Signer, format string) []byte {
	t.Helper()
	var (
		der []byte
		err error
	)
	switch format {
	case "PRIVATE KEY":
		der, err = x509.MarshalPKCS8PrivateKey(key)
	case "EC PRIVATE KEY":
		der, err = x509.MarshalECPrivateKey(key.(*ecdsa.PrivateKey))
	case "RSA PRIVATE KEY":
		der = x509.MarshalPKCS1PrivateKey(key.(*rsa.PrivateKey))
	}
	if err != nil {
		t.Fatalf("marshal key: %v", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: format, Bytes: der})
}
