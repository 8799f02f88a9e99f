package spiffe

import (
	"crypto/x509"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

var testTD = spiffeid.RequireTrustDomainFromString("cluster.local")

func TestParseTrustDomain(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		input string
		ok    bool
	}{
		{"the default trust domain is accepted", "cluster.local", true},
		{"digits, dashes and underscores are accepted", "td-1_a.example", true},
		{"an empty name is rejected", "", false},
		{"uppercase letters are rejected", "Cluster.local", false},
		{"the spiffe:// form is rejected", "spiffe://cluster.local", false},
		{"a port is rejected", "cluster.local:443", false},
		{"a path is rejected", "cluster.local/ns", false},
		{"a name longer than 255 bytes is rejected", strings.Repeat("a", 256), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			td, err := ParseTrustDomain(tt.input)
			if tt.ok {
				if err != nil || td.Name() != tt.input {
					t.Fatalf("ParseTrustDomain(%q) = %q, %v", tt.input, td, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidTrustDomain) {
				t.Fatalf("ParseTrustDomain(%q) error = %v, want ErrInvalidTrustDomain", tt.input, err)
			}
		})
	}
}

func TestServiceAccountID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		td        spiffeid.TrustDomain
		namespace string
		sa        string
		want      string
		wantErr   error
	}{
		{"a shared proxy ServiceAccount maps to its ID", testTD, "coxswain-system", "coxswain-shared-proxy", "spiffe://cluster.local/ns/coxswain-system/sa/coxswain-shared-proxy", nil},
		{"a dotted ServiceAccount name is accepted", testTD, "prod", "my.gw-coxswain", "spiffe://cluster.local/ns/prod/sa/my.gw-coxswain", nil},
		{"an empty namespace is rejected", testTD, "", "sa", "", ErrInvalidName},
		{"an empty ServiceAccount is rejected", testTD, "ns", "", "", ErrInvalidName},
		{"a namespace with a slash is rejected", testTD, "a/b", "sa", "", ErrInvalidName},
		{"a ServiceAccount with a slash is rejected", testTD, "ns", "sa/../x", "", ErrInvalidName},
		{"an uppercase namespace is rejected", testTD, "Prod", "sa", "", ErrInvalidName},
		{"a dotted namespace is rejected", testTD, "a.b", "sa", "", ErrInvalidName},
		{"a namespace longer than 63 bytes is rejected", testTD, strings.Repeat("a", 64), "sa", "", ErrInvalidName},
		{"a zero trust domain is rejected", spiffeid.TrustDomain{}, "ns", "sa", "", ErrInvalidTrustDomain},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id, err := ServiceAccountID(tt.td, tt.namespace, tt.sa)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("error = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || id.String() != tt.want {
				t.Fatalf("ServiceAccountID = %q, %v; want %q", id, err, tt.want)
			}
			ns, sa, err := ParseServiceAccountID(id)
			if err != nil || ns != tt.namespace || sa != tt.sa {
				t.Fatalf("round trip = %q, %q, %v", ns, sa, err)
			}
		})
	}
}

func TestParseServiceAccountID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		id   string
	}{
		{"an empty path is rejected", "spiffe://cluster.local"},
		{"a path without the sa segment is rejected", "spiffe://cluster.local/ns/a"},
		{"swapped segments are rejected", "spiffe://cluster.local/sa/a/ns/b"},
		{"a trailing segment is rejected", "spiffe://cluster.local/ns/a/sa/b/c"},
		{"a leading extra segment is rejected", "spiffe://cluster.local/x/ns/a/sa/b"},
		{"an invalid namespace is rejected", "spiffe://cluster.local/ns/A_B/sa/b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := ParseServiceAccountID(spiffeid.RequireFromString(tt.id))
			if !errors.Is(err, ErrNotServiceAccountID) && !errors.Is(err, ErrInvalidName) {
				t.Fatalf("ParseServiceAccountID(%q) error = %v", tt.id, err)
			}
		})
	}
}

func TestServiceAccountFromUsername(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		username string
		ns, sa   string
		wantErr  error
	}{
		{"a ServiceAccount username is parsed", "system:serviceaccount:prod:my-gw-coxswain", "prod", "my-gw-coxswain", nil},
		{"a user is rejected", "alice", "", "", ErrNotServiceAccountUser},
		{"a node is rejected", "system:node:worker-1", "", "", ErrNotServiceAccountUser},
		{"a missing ServiceAccount is rejected", "system:serviceaccount:prod", "", "", ErrNotServiceAccountUser},
		{"an extra colon is rejected", "system:serviceaccount:prod:sa:x", "", "", ErrNotServiceAccountUser},
		{"an empty namespace is rejected", "system:serviceaccount::sa", "", "", ErrInvalidName},
		{"a prefix with other case is rejected", "System:ServiceAccount:prod:sa", "", "", ErrNotServiceAccountUser},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ns, sa, err := ServiceAccountFromUsername(tt.username)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("error = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || ns != tt.ns || sa != tt.sa {
				t.Fatalf("ServiceAccountFromUsername = %q, %q, %v", ns, sa, err)
			}
		})
	}
}

func leafWithURIs(t testing.TB, uris ...string) *x509.Certificate {
	t.Helper()
	leaf := &x509.Certificate{}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatalf("parse %q: %v", s, err)
		}
		leaf.URIs = append(leaf.URIs, u)
	}
	return leaf
}

func TestPeerID(t *testing.T) {
	t.Parallel()
	const good = "spiffe://cluster.local/ns/prod/sa/gw"
	ca := leafWithURIs(t, good)
	ca.IsCA = true
	tests := []struct {
		name    string
		leaf    *x509.Certificate
		wantErr error
	}{
		{"a certificate with one SPIFFE ID of the trust domain is accepted", leafWithURIs(t, good), nil},
		{"a missing certificate is rejected", nil, ErrNoCertificate},
		{"a certificate without a URI SAN is rejected", leafWithURIs(t), ErrNoURISAN},
		{"a certificate with two URI SANs is rejected", leafWithURIs(t, good, "spiffe://cluster.local/ns/a/sa/b"), ErrMultipleURISANs},
		{"a certificate of a foreign trust domain is rejected", leafWithURIs(t, "spiffe://evil.local/ns/prod/sa/gw"), ErrForeignTrustDomain},
		{"a trust domain that only shares a prefix is rejected", leafWithURIs(t, "spiffe://cluster.local.evil/ns/prod/sa/gw"), ErrForeignTrustDomain},
		{"a SPIFFE ID with an empty path is rejected", leafWithURIs(t, "spiffe://cluster.local"), ErrEmptyPath},
		{"an https URI is rejected", leafWithURIs(t, "https://cluster.local/ns/prod/sa/gw"), ErrInvalidID},
		{"a SPIFFE ID with a query is rejected", leafWithURIs(t, good+"?x=1"), ErrInvalidID},
		{"a SPIFFE ID with a dot segment is rejected", leafWithURIs(t, "spiffe://cluster.local/ns/../sa/gw"), ErrInvalidID},
		{"a SPIFFE ID with a port is rejected", leafWithURIs(t, "spiffe://cluster.local:8443/ns/prod/sa/gw"), ErrInvalidID},
		{"a CA certificate is rejected", ca, ErrCACertificate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id, err := PeerID(tt.leaf, testTD)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !id.IsZero() {
					t.Fatalf("PeerID = %q, %v; want error %v", id, err, tt.wantErr)
				}
				return
			}
			if err != nil || id.String() != good {
				t.Fatalf("PeerID = %q, %v", id, err)
			}
		})
	}
}

func TestPeerIDFromChain(t *testing.T) {
	t.Parallel()
	if _, err := PeerIDFromChain(nil, testTD); !errors.Is(err, ErrNoCertificate) {
		t.Fatalf("empty chain error = %v, want ErrNoCertificate", err)
	}
	if _, err := PeerID(leafWithURIs(t, "spiffe://cluster.local/ns/a/sa/b"), spiffeid.TrustDomain{}); !errors.Is(err, ErrForeignTrustDomain) {
		t.Fatalf("zero trust domain error = %v, want ErrForeignTrustDomain", err)
	}
}
