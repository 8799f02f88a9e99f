package pki_test

import (
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/discovery/pki/pkitest"
)

func TestEncodeAndParseCA(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	crt, key, err := ca.EncodePEM()
	if err != nil {
		t.Fatalf("EncodePEM: %v", err)
	}
	parsed, err := pki.ParseCA(crt, key)
	if err != nil {
		t.Fatalf("ParseCA: %v", err)
	}
	if !parsed.Certificate().Equal(ca.Certificate()) {
		t.Fatal("parsed CA certificate differs")
	}
	if _, _, err := parsed.SignSVID(mustCSR(t), svidID, time.Hour, epoch); err != nil {
		t.Fatalf("parsed CA cannot sign: %v", err)
	}
}

func TestParseCA(t *testing.T) {
	t.Parallel()
	ecKey := pkitest.NewKey(t, pkitest.P256)
	ecCA := selfSigned(t, ecKey, true, x509.KeyUsageCertSign|x509.KeyUsageDigitalSignature)
	rsaKey := pkitest.NewKey(t, pkitest.RSA2048)
	rsaCA := selfSigned(t, rsaKey, true, x509.KeyUsageCertSign)
	edKey := pkitest.NewKey(t, pkitest.Ed25519)
	edCA := selfSigned(t, edKey, true, 0)
	otherKey := pkitest.NewKey(t, pkitest.P256)
	leaf := selfSigned(t, ecKey, false, x509.KeyUsageDigitalSignature)
	noCertSign := selfSigned(t, ecKey, true, x509.KeyUsageDigitalSignature)
	weakKey := pkitest.NewKey(t, pkitest.RSA1024)
	weakCA := selfSigned(t, weakKey, true, x509.KeyUsageCertSign)
	ecParams := []byte("-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n")

	tests := []struct {
		name    string
		crt     []byte
		key     []byte
		wantErr error
	}{
		{"an ECDSA CA with a SEC1 key is accepted", certPEM(ecCA), keyPEM(t, ecKey, "EC PRIVATE KEY"), nil},
		{"an ECDSA CA with a PKCS#8 key is accepted", certPEM(ecCA), keyPEM(t, ecKey, "PRIVATE KEY"), nil},
		{"an RSA CA with a PKCS#1 key is accepted", certPEM(rsaCA), keyPEM(t, rsaKey, "RSA PRIVATE KEY"), nil},
		{"an RSA CA with a PKCS#8 key is accepted", certPEM(rsaCA), keyPEM(t, rsaKey, "PRIVATE KEY"), nil},
		{"an Ed25519 CA without key usage is accepted", certPEM(edCA), keyPEM(t, edKey, "PRIVATE KEY"), nil},
		{"an openssl key with EC PARAMETERS first is accepted", certPEM(ecCA), append(ecParams, keyPEM(t, ecKey, "EC PRIVATE KEY")...), nil},
		{"the first certificate of a chain is the CA", certPEM(ecCA, rsaCA), keyPEM(t, ecKey, "PRIVATE KEY"), nil},
		{"a key of another certificate is rejected", certPEM(ecCA), keyPEM(t, otherKey, "PRIVATE KEY"), pki.ErrKeyMismatch},
		{"a chain whose first certificate is not the key's is rejected", certPEM(rsaCA, ecCA), keyPEM(t, ecKey, "PRIVATE KEY"), pki.ErrKeyMismatch},
		{"a leaf certificate is rejected", certPEM(leaf), keyPEM(t, ecKey, "PRIVATE KEY"), pki.ErrNotCA},
		{"a CA whose key usage lacks certSign is rejected", certPEM(noCertSign), keyPEM(t, ecKey, "PRIVATE KEY"), pki.ErrNotCA},
		{"an RSA-1024 CA is rejected", certPEM(weakCA), keyPEM(t, weakKey, "RSA PRIVATE KEY"), pki.ErrUnsupportedKey},
		{"an empty certificate is rejected", nil, keyPEM(t, ecKey, "PRIVATE KEY"), pki.ErrNoCertificate},
		{"an empty key is rejected", certPEM(ecCA), nil, pki.ErrNoKey},
		{"a certificate passed as key is rejected", certPEM(ecCA), certPEM(ecCA), pki.ErrNoKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ca, err := pki.ParseCA(tt.crt, tt.key)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("ParseCA error = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseCA: %v", err)
			}
			if _, _, err := ca.SignSVID(mustCSR(t), svidID, time.Hour, epoch.Add(time.Hour)); err != nil {
				t.Fatalf("SignSVID with parsed CA: %v", err)
			}
		})
	}
}

func TestParseCAGarbage(t *testing.T) {
	t.Parallel()
	garbage := []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
	if _, err := pki.ParseCA(garbage, garbage); err == nil {
		t.Fatal("ParseCA accepted garbage")
	}
	key := []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
	if _, err := pki.ParsePrivateKeyPEM(key); err == nil {
		t.Fatal("ParsePrivateKeyPEM accepted garbage")
	}
}
