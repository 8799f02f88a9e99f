package tlsconfig_test

import (
	"crypto"
	"errors"
	"testing"

	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/discovery/pki/pkitest"
	"coxswain.dev/coxswain/discovery/tlsconfig"
)

func TestRotatingSources(t *testing.T) {
	t.Parallel()
	var certs tlsconfig.RotatingCertificate
	if _, err := certs.Certificate(); !errors.Is(err, tlsconfig.ErrNoCertificate) {
		t.Fatalf("empty certificate source error = %v", err)
	}
	ca := pkitest.NewCA(t, "cluster.local")
	svid := pkitest.SVID(t, ca, proxyID)
	certs.Set(svid)
	if got, err := certs.Certificate(); err != nil || got != svid {
		t.Fatalf("Certificate() = %p, %v", got, err)
	}

	var bundles tlsconfig.RotatingBundle
	if _, err := bundles.Bundle(); !errors.Is(err, tlsconfig.ErrNoBundle) {
		t.Fatalf("empty bundle source error = %v", err)
	}
	bundles.Set(pki.NewBundle())
	if _, err := bundles.Bundle(); !errors.Is(err, tlsconfig.ErrNoBundle) {
		t.Fatalf("bundle without roots error = %v", err)
	}
	bundles.Set(pkitest.Bundle(ca))
	if b, err := bundles.Bundle(); err != nil || b.Len() != 1 {
		t.Fatalf("Bundle() = %v, %v", b, err)
	}
}

func TestNewCertificate(t *testing.T) {
	t.Parallel()
	ca := pkitest.NewCA(t, "cluster.local")
	svid := pkitest.SVID(t, ca, proxyID)
	cert := tlsconfig.NewCertificate(svid.PrivateKey.(crypto.Signer), svid.Leaf, ca.Certificate())
	if len(cert.Certificate) != 2 || cert.Leaf != svid.Leaf {
		t.Fatalf("NewCertificate chain = %d certificates", len(cert.Certificate))
	}
}
