package pki_test

import (
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/discovery/pki/pkitest"
)

func FuzzCheckCSR(f *testing.F) {
	for _, opts := range [][]pkitest.CSROption{
		nil,
		{pkitest.WithKeyType(pkitest.Ed25519), pkitest.RequestURIs("spiffe://cluster.local/ns/a/sa/b")},
		{pkitest.RequestCA(), pkitest.RequestDNSNames("a.example")},
		{pkitest.CorruptSignature()},
	} {
		f.Add(pkitest.CSR(f, opts...))
	}
	f.Add([]byte{0x30, 0x00})
	ca, err := pki.NewCA(td, 24*time.Hour, epoch)
	if err != nil {
		f.Fatal(err)
	}
	id := spiffeid.RequireFromString("spiffe://cluster.local/ns/a/sa/b")
	f.Fuzz(func(t *testing.T, der []byte) {
		csr, err := pki.CheckCSR(der)
		if err != nil {
			return
		}
		cert, _, err := ca.SignSVID(csr, id, time.Hour, epoch.Add(time.Hour))
		if err != nil {
			t.Fatalf("a checked CSR could not be signed: %v", err)
		}
		if cert.IsCA || len(cert.URIs) != 1 || cert.URIs[0].String() != id.String() || len(cert.DNSNames) != 0 {
			t.Fatalf("the CSR changed the SVID: %+v", cert)
		}
	})
}

func FuzzParseCA(f *testing.F) {
	ca, err := pki.NewCA(td, 24*time.Hour, epoch)
	if err != nil {
		f.Fatal(err)
	}
	crt, key, err := ca.EncodePEM()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(crt, key)
	f.Add(key, crt)
	f.Add([]byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"), []byte("-----BEGIN EC PRIVATE KEY-----\n-----END EC PRIVATE KEY-----\n"))
	f.Fuzz(func(t *testing.T, crt, key []byte) {
		parsed, err := pki.ParseCA(crt, key)
		if err != nil {
			return
		}
		if c := parsed.Certificate(); !c.IsCA || !c.BasicConstraintsValid {
			t.Fatal("ParseCA accepted a certificate that is not a CA")
		}
		if _, _, err := parsed.EncodePEM(); err != nil {
			t.Fatalf("EncodePEM of a parsed CA: %v", err)
		}
	})
}

func FuzzParseBundlePEM(f *testing.F) {
	a := pkitest.NewCAAt(f, "cluster.local", epoch)
	b := pkitest.NewCAAt(f, "cluster.local", epoch.Add(time.Hour))
	f.Add(pkitest.Bundle(a, b).PEM())
	f.Add(append(b.Certificate().Raw, a.Certificate().Raw...))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		bundle, err := pki.ParseBundlePEM(data)
		if err != nil {
			return
		}
		again, err := pki.ParseBundlePEM(bundle.PEM())
		if err != nil || !again.Equal(bundle) {
			t.Fatalf("bundle does not round trip: %v", err)
		}
	})
}
