package pki_test

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/discovery/pki/pkitest"
)

var svidID = spiffeid.RequireFromString("spiffe://cluster.local/ns/prod/sa/gw-coxswain")

// leafShape is what SignSVID must decide whatever the CSR asks for.
type leafShape struct {
	URIs                        []string
	DNSNames, EmailAddresses    []string
	IPCount                     int
	Subject                     string
	IsCA, BasicConstraintsValid bool
	KeyUsage                    x509.KeyUsage
	ExtKeyUsage                 []x509.ExtKeyUsage
	NotBefore, NotAfter         time.Time
}

func shapeOf(c *x509.Certificate) leafShape {
	s := leafShape{
		DNSNames: c.DNSNames, EmailAddresses: c.EmailAddresses, IPCount: len(c.IPAddresses),
		Subject: c.Subject.String(), IsCA: c.IsCA, BasicConstraintsValid: c.BasicConstraintsValid,
		KeyUsage: c.KeyUsage, ExtKeyUsage: c.ExtKeyUsage, NotBefore: c.NotBefore, NotAfter: c.NotAfter,
	}
	for _, u := range c.URIs {
		s.URIs = append(s.URIs, u.String())
	}
	return s
}

func TestSignSVIDOverridesTheCSR(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	now := epoch.Add(time.Hour)
	want := leafShape{
		URIs:                  []string{svidID.String()},
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		NotBefore:             now.Add(-pki.ClockSkew),
		NotAfter:              now.Add(24 * time.Hour),
	}
	tests := []struct {
		name string
		opts []pkitest.CSROption
	}{
		{"a CSR without names gets the authenticated ID", nil},
		{"a CSR asking for IsCA is signed as a leaf", []pkitest.CSROption{pkitest.RequestCA()}},
		{"extra URI and DNS SANs in the CSR are dropped", []pkitest.CSROption{
			pkitest.RequestURIs("spiffe://cluster.local/ns/coxswain-system/sa/coxswain-shared-proxy", "spiffe://evil.local/ns/a/sa/b"),
			pkitest.RequestDNSNames("coxswain-discovery.coxswain-system.svc", "*.example.com"),
		}},
		{"a CSR asking for the ID of another ServiceAccount gets its own", []pkitest.CSROption{
			pkitest.RequestURIs("spiffe://cluster.local/ns/prod/sa/other"),
		}},
		{"the subject the CSR asks for is ignored", []pkitest.CSROption{
			pkitest.RequestSubject(pkix.Name{CommonName: "coxswain discovery CA", Organization: []string{"system:masters"}}),
		}},
		{"an Ed25519 CSR is signed", []pkitest.CSROption{pkitest.WithKeyType(pkitest.Ed25519)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			csr := mustCSR(t, tt.opts...)
			cert, der, err := ca.SignSVID(csr, svidID, 24*time.Hour, now)
			if err != nil {
				t.Fatalf("SignSVID: %v", err)
			}
			if diff := cmp.Diff(want, shapeOf(cert)); diff != "" {
				t.Fatalf("SVID (-want +got):\n%s", diff)
			}
			if string(der) != string(cert.Raw) {
				t.Fatal("DER differs from the parsed certificate")
			}
			verify(t, ca, cert, now, x509.ExtKeyUsageClientAuth)
			opts := x509.VerifyOptions{Roots: pki.NewBundle(ca.Certificate()).Pool(), CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
			if _, err := cert.Verify(opts); err == nil {
				t.Fatal("a proxy SVID verifies as a TLS server certificate")
			}
		})
	}
}

func verify(t *testing.T, ca *pki.CA, cert *x509.Certificate, now time.Time, usage x509.ExtKeyUsage) {
	t.Helper()
	opts := x509.VerifyOptions{Roots: pki.NewBundle(ca.Certificate()).Pool(), CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}}
	if _, err := cert.Verify(opts); err != nil {
		t.Fatalf("verify against the CA: %v", err)
	}
}

func TestSignSVIDValidity(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	caCert := ca.Certificate()
	tests := []struct {
		name          string
		now           time.Time
		ttl           time.Duration
		wantNotBefore time.Time
		wantNotAfter  time.Time
	}{
		{"a fresh SVID is backdated by the clock skew", epoch.Add(time.Hour), time.Hour, epoch.Add(time.Hour - pki.ClockSkew), epoch.Add(2 * time.Hour)},
		{"an SVID never starts before the CA", caCert.NotBefore.Add(time.Second), time.Hour, caCert.NotBefore, caCert.NotBefore.Add(time.Second + time.Hour)},
		{"an SVID never outlives the CA", caCert.NotAfter.Add(-time.Hour), 24 * time.Hour, caCert.NotAfter.Add(-time.Hour - pki.ClockSkew), caCert.NotAfter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cert, _, err := ca.SignSVID(mustCSR(t), svidID, tt.ttl, tt.now)
			if err != nil {
				t.Fatalf("SignSVID: %v", err)
			}
			got := []time.Time{cert.NotBefore, cert.NotAfter}
			if diff := cmp.Diff([]time.Time{tt.wantNotBefore, tt.wantNotAfter}, got); diff != "" {
				t.Fatalf("validity (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSignSVIDRejects(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	caCert := ca.Certificate()
	now := epoch.Add(time.Hour)
	tests := []struct {
		name    string
		id      string
		ttl     time.Duration
		now     time.Time
		wantErr error
	}{
		{"an expired CA does not sign", svidID.String(), time.Hour, caCert.NotAfter.Add(time.Second), pki.ErrCAExpired},
		{"a CA that is not yet valid does not sign", svidID.String(), time.Hour, caCert.NotBefore.Add(-time.Second), pki.ErrCAExpired},
		{"an ID of a foreign trust domain is refused", "spiffe://evil.local/ns/prod/sa/gw", time.Hour, now, pki.ErrInvalidID},
		{"an ID with an empty path is refused", "spiffe://cluster.local", time.Hour, now, pki.ErrInvalidID},
		{"a zero ID is refused", "", time.Hour, now, pki.ErrInvalidID},
		{"a ttl under the minimum is refused", svidID.String(), time.Second, now, pki.ErrInvalidLifetime},
		{"a ttl over the maximum is refused", svidID.String(), 365 * 24 * time.Hour, now, pki.ErrInvalidLifetime},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var id spiffeid.ID
			if tt.id != "" {
				id = spiffeid.RequireFromString(tt.id)
			}
			_, _, err := ca.SignSVID(mustCSR(t), id, tt.ttl, tt.now)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("SignSVID error = %v, want %v", err, tt.wantErr)
			}
		})
	}
	t.Run("an unchecked CSR with a weak key is refused", func(t *testing.T) {
		t.Parallel()
		csr, err := x509.ParseCertificateRequest(pkitest.CSR(t, pkitest.WithKeyType(pkitest.RSA1024)))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := ca.SignSVID(csr, svidID, time.Hour, now); !errors.Is(err, pki.ErrUnsupportedKey) {
			t.Fatalf("SignSVID error = %v, want ErrUnsupportedKey", err)
		}
	})
	t.Run("a nil CSR is refused", func(t *testing.T) {
		t.Parallel()
		if _, _, err := ca.SignSVID(nil, svidID, time.Hour, now); !errors.Is(err, pki.ErrInvalidCSR) {
			t.Fatalf("SignSVID error = %v, want ErrInvalidCSR", err)
		}
	})
}

func TestSignSVIDSerialsAreRandom(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	csr := mustCSR(t)
	seen := map[string]bool{}
	for range 32 {
		cert, _, err := ca.SignSVID(csr, svidID, time.Hour, epoch.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if cert.SerialNumber.Sign() <= 0 || cert.SerialNumber.BitLen() > 128 || seen[cert.SerialNumber.String()] {
			t.Fatalf("bad or repeated serial %s", cert.SerialNumber)
		}
		seen[cert.SerialNumber.String()] = true
	}
}

func TestIssueServerCert(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	now := epoch.Add(time.Hour)
	id := spiffeid.RequireFromString("spiffe://cluster.local/ns/coxswain-system/sa/coxswain-controller")
	key := pkitest.NewKey(t, pkitest.P256)
	dns := []string{"coxswain-discovery.coxswain-system.svc", "coxswain-discovery.coxswain-system.svc.cluster.local"}
	cert, _, err := ca.IssueServerCert(key.Public(), id, dns, 12*time.Hour, now)
	if err != nil {
		t.Fatalf("IssueServerCert: %v", err)
	}
	want := leafShape{
		URIs: []string{id.String()}, DNSNames: dns, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		NotBefore:   now.Add(-pki.ClockSkew), NotAfter: now.Add(12 * time.Hour),
	}
	if diff := cmp.Diff(want, shapeOf(cert)); diff != "" {
		t.Fatalf("server certificate (-want +got):\n%s", diff)
	}
	opts := x509.VerifyOptions{Roots: pki.NewBundle(ca.Certificate()).Pool(), CurrentTime: now, DNSName: dns[0]}
	if _, err := cert.Verify(opts); err != nil {
		t.Fatalf("verify as a server for %s: %v", dns[0], err)
	}
	if _, _, err := ca.IssueServerCert(pkitest.NewKey(t, pkitest.P521).Public(), id, dns, time.Hour, now); !errors.Is(err, pki.ErrUnsupportedKey) {
		t.Fatalf("P-521 key error = %v, want ErrUnsupportedKey", err)
	}
}

func TestNameConstraintRefusesForeignLeaves(t *testing.T) {
	t.Parallel()
	ca := pkitest.NewCA(t, "cluster.local")
	foreign := pkitest.SVID(t, ca, "spiffe://evil.local/ns/a/sa/b")
	opts := x509.VerifyOptions{Roots: pkitest.Bundle(ca).Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if _, err := foreign.Leaf.Verify(opts); err == nil {
		t.Fatal("a leaf outside the CA's URI name constraint verified")
	}
	own := pkitest.SVID(t, ca, "spiffe://cluster.local/ns/a/sa/b")
	if _, err := own.Leaf.Verify(opts); err != nil {
		t.Fatalf("own leaf: %v", err)
	}
}
