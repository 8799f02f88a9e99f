package spiffe_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"

	"coxswain.dev/coxswain/discovery/pki/pkitest"
	"coxswain.dev/coxswain/discovery/spiffe"
)

const workloadID = "spiffe://cluster.local/ns/prod/sa/gw"

var td = spiffeid.RequireTrustDomainFromString("cluster.local")

func chainOf(t *testing.T, cert *tls.Certificate) []*x509.Certificate {
	t.Helper()
	var chain []*x509.Certificate
	for _, der := range cert.Certificate {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		chain = append(chain, c)
	}
	return chain
}

// Tests that Verify lets go-spiffe decide and names each of its refusals by our sentinel errors,
// keeping the x509 error of a chain that does not verify.
func TestVerify(t *testing.T) {
	t.Parallel()
	ca := pkitest.NewCA(t, "cluster.local")
	foreign := pkitest.NewCA(t, "cluster.local")
	roots := x509bundle.FromX509Authorities(td, []*x509.Certificate{ca.Certificate()})
	tests := []struct {
		name    string
		cert    *tls.Certificate
		wantErr error
		wantAs  any
	}{
		{"a certificate without a URI SAN is refused", pkitest.Issue(t, ca, pkitest.DNSNames("gw.prod.svc")), spiffe.ErrNoURISAN, nil},
		{"a certificate with two URI SANs is refused", pkitest.Issue(t, ca, pkitest.URIs(workloadID, "spiffe://cluster.local/ns/a/sa/b")), spiffe.ErrMultipleURISANs, nil},
		{"a URI SAN that is no SPIFFE ID is refused", pkitest.Issue(t, ca, pkitest.URIs("https://cluster.local/ns/prod/sa/gw")), spiffe.ErrInvalidID, nil},
		{"a CA certificate as the leaf is refused", pkitest.SVID(t, ca, workloadID, pkitest.AsCA()), spiffe.ErrCACertificate, nil},
		{"a certificate of a foreign CA is refused", pkitest.SVID(t, foreign, workloadID), nil, new(x509.UnknownAuthorityError)},
		{"an expired certificate is refused", pkitest.SVID(t, ca, workloadID, pkitest.Expired()), nil, new(x509.CertificateInvalidError)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id, verified, err := spiffe.Verify(chainOf(t, tt.cert), roots)
			if err == nil || !id.IsZero() || verified != nil {
				t.Fatalf("Verify = %q, %d chains, %v; want a refusal", id, len(verified), err)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("error = %v, want %v", err, tt.wantErr)
			}
			if tt.wantAs != nil && !errors.As(err, tt.wantAs) {
				t.Fatalf("error = %v, want %T", err, tt.wantAs)
			}
		})
	}

	t.Run("an empty chain is refused", func(t *testing.T) {
		t.Parallel()
		if _, _, err := spiffe.Verify(nil, roots); !errors.Is(err, spiffe.ErrNoCertificate) {
			t.Fatalf("error = %v, want ErrNoCertificate", err)
		}
	})
	t.Run("a valid SVID gives its ID and a chain to the root", func(t *testing.T) {
		t.Parallel()
		id, verified, err := spiffe.Verify(chainOf(t, pkitest.SignedSVID(t, ca, workloadID)), roots)
		if err != nil || id.String() != workloadID || len(verified) != 1 || !verified[0][len(verified[0])-1].Equal(ca.Certificate()) {
			t.Fatalf("Verify = %q, %v, %v", id, verified, err)
		}
	})
	t.Run("a verification time is passed to go-spiffe", func(t *testing.T) {
		t.Parallel()
		early := chainOf(t, pkitest.SVID(t, ca, workloadID, pkitest.NotYetValid()))
		if _, _, err := spiffe.Verify(early, roots, x509svid.WithTime(early[0].NotBefore.Add(time.Second))); err != nil {
			t.Fatalf("an SVID verified at a time it was valid: %v", err)
		}
	})
}

func withEKU(usages ...x509.ExtKeyUsage) *x509.Certificate {
	return &x509.Certificate{ExtKeyUsage: usages}
}

// Tests that CheckExtKeyUsage decides as crypto/x509 does: every certificate of a chain must
// name the usage, any usage, or none.
func TestCheckExtKeyUsage(t *testing.T) {
	t.Parallel()
	client, server := x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth
	root := withEKU()
	tests := []struct {
		name     string
		verified [][]*x509.Certificate
		usage    x509.ExtKeyUsage
		ok       bool
	}{
		{"a leaf for client auth serves as a client", [][]*x509.Certificate{{withEKU(client), root}}, client, true},
		{"a leaf only for client auth does not serve", [][]*x509.Certificate{{withEKU(client), root}}, server, false},
		{"a leaf for both serves", [][]*x509.Certificate{{withEKU(client, server), root}}, server, true},
		{"a leaf without extended key usages serves any usage", [][]*x509.Certificate{{withEKU(), root}}, server, true},
		{"a leaf for any usage serves", [][]*x509.Certificate{{withEKU(x509.ExtKeyUsageAny), root}}, server, true},
		{"an intermediate that restricts the usage refuses it", [][]*x509.Certificate{{withEKU(server), withEKU(client), root}}, server, false},
		{"a leaf with only an unknown usage refuses", [][]*x509.Certificate{{{UnknownExtKeyUsage: []asn1.ObjectIdentifier{{1, 2, 3}}}, root}}, server, false},
		{"one chain that allows it is enough", [][]*x509.Certificate{{withEKU(client), root}, {withEKU(server), root}}, server, true},
		{"no chain refuses", nil, server, false},
		{"an empty chain refuses", [][]*x509.Certificate{{}}, server, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := spiffe.CheckExtKeyUsage(tt.verified, tt.usage)
			if tt.ok {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var invalid x509.CertificateInvalidError
			if !errors.As(err, &invalid) || invalid.Reason != x509.IncompatibleUsage {
				t.Fatalf("error = %v, want an incompatible usage", err)
			}
		})
	}
}
