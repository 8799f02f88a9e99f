package e2e

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
)

func TestTheNamespaceHasOnlyALoopbackAndNoRouteOut(t *testing.T) {
	if !InNamespace() {
		t.Skip(EnvSwitch + "=skip: the suite runs only inside its private namespaces")
	}
	if err := onlyLoopback(); err != nil {
		t.Fatal(err)
	}
	if err := noRouteOut(t.Context()); err != nil {
		t.Fatal(err)
	}
	_, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", "192.0.2.1:80")
	if !errors.Is(err, syscall.ENETUNREACH) {
		t.Fatalf("dial outside: %v, want network unreachable", err)
	}
}

func TestNetlinkPutsATestRangeOnTheLoopback(t *testing.T) {
	if !InNamespace() {
		t.Skip(EnvSwitch + "=skip: the suite runs only inside its private namespaces")
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	err = withRouteSocket(func(s *routeSocket) error {
		if err := s.setUp(lo.Index); err != nil {
			return err
		}
		return s.addAddress(lo.Index, netip.MustParsePrefix("198.18.1.1/24"))
	})
	if err != nil {
		t.Fatal(err)
	}
	// Every address of the range is local now, not only the one added.
	lis, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "198.18.1.7:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	conn, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()

	err = withRouteSocket(func(s *routeSocket) error {
		return s.addAddress(lo.Index, netip.MustParsePrefix("198.18.1.1/24"))
	})
	if !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("adding the address again: %v, want EEXIST from the kernel", err)
	}
}
