package client

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"testing"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
)

// FuzzParseResponse feeds arbitrary bytes as a bootstrap answer: it must never panic nor accept
// a certificate that is not for the caller's key.
func FuzzParseResponse(f *testing.F) {
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), []byte(""))
	f.Add([]byte(""), []byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"))
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, chain, bundle []byte) {
		svid, err := parseResponse(&discoveryv1.BootstrapResponse{SvidChainPem: chain, TrustBundlePem: bundle}, key)
		if err == nil && !key.PublicKey.Equal(svid.Certificate.Leaf.PublicKey) {
			t.Fatal("accepted a certificate for another key")
		}
	})
}
