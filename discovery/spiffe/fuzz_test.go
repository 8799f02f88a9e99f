package spiffe

import (
	"crypto/x509"
	"net/url"
	"strings"
	"testing"
)

func FuzzPeerID(f *testing.F) {
	for _, s := range []string{
		"spiffe://cluster.local/ns/prod/sa/gw",
		"spiffe://cluster.local",
		"spiffe://cluster.local/",
		"spiffe://evil.local/ns/a/sa/b",
		"spiffe://cluster.local/ns/a/sa/b\nspiffe://cluster.local/ns/c/sa/d",
		"SPIFFE://cluster.local/ns/a/sa/b",
		"spiffe://user@cluster.local/ns/a/sa/b",
		"spiffe://cluster.local/ns/%2e%2e/sa/b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, input string) {
		leaf := &x509.Certificate{}
		for _, s := range strings.Split(input, "\n") {
			if u, err := url.Parse(s); err == nil {
				leaf.URIs = append(leaf.URIs, u)
			}
		}
		id, err := PeerID(leaf, testTD)
		if err != nil {
			return
		}
		if len(leaf.URIs) != 1 || !id.MemberOf(testTD) || id.Path() == "" {
			t.Fatalf("PeerID accepted %q as %q", input, id)
		}
		if ns, sa, err := ParseServiceAccountID(id); err == nil {
			back, err := ServiceAccountID(testTD, ns, sa)
			if err != nil || back != id {
				t.Fatalf("round trip of %q = %q, %v", id, back, err)
			}
		}
	})
}

func FuzzServiceAccountFromUsername(f *testing.F) {
	f.Add("system:serviceaccount:prod:gw")
	f.Add("system:serviceaccount::")
	f.Add("system:serviceaccount:a:b:c")
	f.Fuzz(func(t *testing.T, username string) {
		ns, sa, err := ServiceAccountFromUsername(username)
		if err != nil {
			return
		}
		if _, err := ServiceAccountID(testTD, ns, sa); err != nil {
			t.Fatalf("accepted %q but cannot map it: %v", username, err)
		}
	})
}
