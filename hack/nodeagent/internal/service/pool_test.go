package service

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func mustPool(t *testing.T, prefix string) *Pool {
	t.Helper()
	p, err := NewPool(netip.MustParsePrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func alloc(t *testing.T, p *Pool, key string) string {
	t.Helper()
	a, err := p.Allocate(key)
	if err != nil {
		t.Fatalf("allocate for %s: %v", key, err)
	}
	return a.String()
}

// Tests that a pool hands out its addresses in order without the network and broadcast
// addresses, gives a key the address it holds again, and reports itself full.
func TestPoolAllocatesEachAddressOnce(t *testing.T) {
	t.Parallel()
	p := mustPool(t, "10.245.0.0/29")
	var got []string
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
		got = append(got, alloc(t, p, k))
	}
	want := []string{"10.245.0.1", "10.245.0.2", "10.245.0.3", "10.245.0.4", "10.245.0.5", "10.245.0.6"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("addresses (-want +got):\n%s", diff)
	}
	if a := alloc(t, p, "c"); a != "10.245.0.3" {
		t.Errorf("a key allocating again got %s, want the address it holds", a)
	}
	if _, err := p.Allocate("g"); !errors.Is(err, ErrPoolFull) {
		t.Errorf("allocating from a full pool: %v, want ErrPoolFull", err)
	}
}

// Tests that a released address goes back to the pool but is handed out again only after the
// addresses never used.
func TestPoolReusesReleasedAddressesLate(t *testing.T) {
	t.Parallel()
	p := mustPool(t, "10.245.0.0/29")
	alloc(t, p, "a")
	alloc(t, p, "b")
	p.Release("a")
	if _, ok := p.Lookup("a"); ok {
		t.Error("a released key still holds an address")
	}
	var got []string
	for _, k := range []string{"c", "d", "e", "f", "g"} {
		got = append(got, alloc(t, p, k))
	}
	want := []string{"10.245.0.3", "10.245.0.4", "10.245.0.5", "10.245.0.6", "10.245.0.1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("addresses after a release (-want +got):\n%s", diff)
	}
}

// Tests what Claim accepts: a free usable address of the range, or the one the key holds.
func TestPoolClaim(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		addr string
		want bool
	}{
		{"a free address of the range is claimed", "10.245.0.9", true},
		{"an address held by another key is refused", "10.245.0.1", false},
		{"the address the key already holds is kept", "10.245.0.2", true},
		{"the network address is refused", "10.245.0.0", false},
		{"the broadcast address is refused", "10.245.0.255", false},
		{"an address outside the range is refused", "10.246.0.1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := mustPool(t, "10.245.0.0/24")
			alloc(t, p, "other")
			alloc(t, p, "me")
			if got := p.Claim("me", netip.MustParseAddr(tc.addr)); got != tc.want {
				t.Errorf("Claim(%s) = %v, want %v", tc.addr, got, tc.want)
			}
			a, _ := p.Lookup("me")
			if want := map[bool]string{true: tc.addr, false: "10.245.0.2"}[tc.want]; a.String() != want {
				t.Errorf("the key holds %s, want %s", a, want)
			}
		})
	}
}

// Tests that restoring the addresses recorded in the Services' status gives a contested address
// to the older Service, whatever the order of the input, and that the others are then allocated
// addresses nobody holds.
func TestPoolRestoreGivesAClashToTheOlder(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	hs := []Holding{
		{Key: "ns/young", Created: t0.Add(time.Hour), Addr: netip.MustParseAddr("10.245.0.7")},
		{Key: "ns/outside", Created: t0, Addr: netip.MustParseAddr("192.0.2.7")},
		{Key: "ns/old", Created: t0, Addr: netip.MustParseAddr("10.245.0.7")},
		{Key: "ns/other", Created: t0.Add(time.Minute), Addr: netip.MustParseAddr("10.245.0.1")},
	}
	p := mustPool(t, "10.245.0.0/24")
	lost := p.Restore(hs)
	if diff := cmp.Diff([]string{"ns/outside", "ns/young"}, lost); diff != "" {
		t.Errorf("keys that lost their address (-want +got):\n%s", diff)
	}
	for k, want := range map[string]string{"ns/old": "10.245.0.7", "ns/other": "10.245.0.1"} {
		if a, _ := p.Lookup(k); a.String() != want {
			t.Errorf("%s holds %s, want %s", k, a, want)
		}
	}
	if a := alloc(t, p, "ns/young"); a == "10.245.0.7" || a == "10.245.0.1" {
		t.Errorf("the younger Service got %s, an address already held", a)
	}
}

// Tests that a pool refuses ranges without room and non-IPv4 ones.
func TestNewPoolRefusesBadRanges(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"10.245.0.0/31", "10.245.0.1/32", "fd00::/64"} {
		if _, err := NewPool(netip.MustParsePrefix(prefix)); err == nil {
			t.Errorf("NewPool(%s) accepted it", prefix)
		}
	}
}
