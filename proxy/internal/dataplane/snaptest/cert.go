package snaptest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
)

// Certificate returns a self-signed ECDSA P-256 certificate for dnsNames, valid for a day, as
// a Certificate payload, with the parsed leaf for checking which one a handshake served.
func Certificate(tb testing.TB, name string, dnsNames ...string) (*discoveryv1.Certificate, *x509.Certificate) {
	tb.Helper()
	cert, leaf, err := NewCertificate(name, dnsNames...)
	if err != nil {
		tb.Fatal(err)
	}
	return cert, leaf
}

// NewCertificate is Certificate for callers without a testing.TB.
func NewCertificate(name string, dnsNames ...string) (*discoveryv1.Certificate, *x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     dnsNames,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return &discoveryv1.Certificate{
		Name:                name,
		CertificateChainPem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		PrivateKeyPem:       pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, leaf, nil
}
