package pki_test

import (
	"bytes"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/discovery/pki/pkitest"
)

func TestBundlePEMIsCanonical(t *testing.T) {
	t.Parallel()
	a := pkitest.NewCAAt(t, "cluster.local", epoch).Certificate()
	b := pkitest.NewCAAt(t, "cluster.local", epoch.Add(time.Hour)).Certificate()
	c := pkitest.NewCAAt(t, "cluster.local", epoch.Add(2*time.Hour)).Certificate()
	want := pki.NewBundle(a, b, c).PEM()
	for _, order := range [][]*x509.Certificate{{c, b, a}, {b, a, c, a}, {c, a, b, b}} {
		got := pki.NewBundle(order...)
		if !bytes.Equal(want, got.PEM()) || got.Len() != 3 {
			t.Fatalf("bundle of %d inputs is not canonical", len(order))
		}
		parsed, err := pki.ParseBundlePEM(certPEM(order...))
		if err != nil {
			t.Fatalf("ParseBundlePEM: %v", err)
		}
		if !parsed.Equal(got) {
			t.Fatal("parsed bundle differs")
		}
	}
	if !pki.NewBundle(a).Contains(a) || pki.NewBundle(a).Contains(b) {
		t.Fatal("Contains is wrong")
	}
}

func TestParseBundlePEMRejects(t *testing.T) {
	t.Parallel()
	ca := newCA(t)
	leaf, _, err := ca.SignSVID(mustCSR(t), svidID, time.Hour, epoch.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		pem     []byte
		wantErr error
	}{
		{"an empty bundle is rejected", nil, pki.ErrNoCertificate},
		{"a bundle of only keys is rejected", []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), pki.ErrNoCertificate},
		{"a bundle holding a leaf is rejected", certPEM(ca.Certificate(), leaf), pki.ErrNotCA},
		{"an oversized bundle is rejected", bytes.Repeat([]byte("A"), pki.MaxBundleBytes+1), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := pki.ParseBundlePEM(tt.pem)
			if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Fatalf("ParseBundlePEM error = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestNeedsRotation(t *testing.T) {
	t.Parallel()
	ca := newCA(t).Certificate()
	life := ca.NotAfter.Sub(ca.NotBefore)
	tests := []struct {
		name string
		now  time.Time
		want bool
	}{
		{"a fresh CA is kept", ca.NotBefore.Add(time.Hour), false},
		{"a CA at half its lifetime is kept", ca.NotBefore.Add(life / 2), false},
		{"a CA past two thirds of its lifetime is rotated", ca.NotBefore.Add(life*2/3 + time.Minute), true},
		{"an expired CA is rotated", ca.NotAfter.Add(time.Second), true},
		{"a CA that is not yet valid is rotated", ca.NotBefore.Add(-time.Hour), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := pki.NeedsRotation(ca, tt.now); got != tt.want {
				t.Fatalf("NeedsRotation = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPublishRoots(t *testing.T) {
	t.Parallel()
	old := pkitest.NewCAAt(t, "cluster.local", epoch).Certificate() // expires epoch+24h
	older := pkitest.NewCAAt(t, "cluster.local", epoch.Add(-12*time.Hour)).Certificate()
	current := pkitest.NewCAAt(t, "cluster.local", epoch.Add(16*time.Hour)).Certificate()
	now := epoch.Add(18 * time.Hour)
	tests := []struct {
		name    string
		retired []pki.RetiredRoot
		want    []*x509.Certificate
	}{
		{"without retired roots only the current root is published", nil, []*x509.Certificate{current}},
		{"a retired root with live SVIDs is kept", []pki.RetiredRoot{{Certificate: old, LastLeafExpiry: now.Add(time.Hour)}}, []*x509.Certificate{old, current}},
		{"a retired root whose SVIDs all expired is dropped", []pki.RetiredRoot{{Certificate: old, LastLeafExpiry: now.Add(-time.Second)}}, []*x509.Certificate{current}},
		{"an expired retired root is dropped", []pki.RetiredRoot{{Certificate: older, LastLeafExpiry: now.Add(time.Hour)}}, []*x509.Certificate{current}},
		{"a retired root equal to the current one appears once", []pki.RetiredRoot{{Certificate: current, LastLeafExpiry: now.Add(time.Hour)}}, []*x509.Certificate{current}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := pki.PublishRoots(current, tt.retired, now)
			if diff := cmp.Diff(pki.NewBundle(tt.want...).PEM(), got.PEM()); diff != "" {
				t.Fatalf("published roots (-want +got):\n%s", diff)
			}
		})
	}
}

// Tests that X509Bundle hands go-spiffe the roots, in canonical order, as the bundle of the
// trust domain asked for, and that changing the copy leaves the bundle alone.
func TestBundleAsGoSpiffeBundle(t *testing.T) {
	t.Parallel()
	a := pkitest.NewCAAt(t, "cluster.local", epoch).Certificate()
	b := pkitest.NewCAAt(t, "cluster.local", epoch.Add(time.Hour)).Certificate()
	bundle := pki.NewBundle(b, a)
	td := spiffeid.RequireTrustDomainFromString("cluster.local")
	got := bundle.X509Bundle(td)
	if got.TrustDomain() != td {
		t.Fatalf("trust domain %s, want %s", got.TrustDomain(), td)
	}
	if diff := cmp.Diff(bundle.Certificates(), got.X509Authorities()); diff != "" {
		t.Fatalf("authorities (-bundle +go-spiffe):\n%s", diff)
	}
	got.RemoveX509Authority(a)
	if !bundle.Contains(a) || bundle.Len() != 2 {
		t.Fatal("changing go-spiffe's bundle changed ours")
	}
}
