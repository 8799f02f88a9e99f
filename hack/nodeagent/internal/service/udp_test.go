package service

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// udpBackend answers each datagram on a loopback port with its name, a colon and the datagram.
func udpBackend(t *testing.T, name string) netip.AddrPort {
	t.Helper()
	conn, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { _ = conn.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := conn.ReadFromUDPAddrPort(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			_, _ = conn.WriteToUDPAddrPort([]byte(name+":"+string(buf[:n])), from)
		}
	}()
	return netip.MustParseAddrPort(conn.LocalAddr().String())
}

func freeUDPAddr(t *testing.T) netip.AddrPort {
	t.Helper()
	conn, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.2:0")))
	if err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddrPort(conn.LocalAddr().String())
	_ = conn.Close()
	return a
}

// udpClient is a socket connected to the frontend: it only takes answers from that address.
func udpClient(t *testing.T, front netip.AddrPort) *net.UDPConn {
	t.Helper()
	c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(front))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// ask sends msg and returns the answer, or the error of the read.
func ask(c *net.UDPConn, msg string) (string, error) {
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	return string(buf[:n]), err
}

func udpFrontend(a netip.AddrPort, backends ...netip.AddrPort) Frontend {
	return Frontend{Addr: a, Protocol: corev1.ProtocolUDP, Backends: backends}
}

// Tests that each UDP client keeps to the backend chosen for its first datagram, that clients
// go to the backends in turn, that answers come from the frontend's address, and that the
// clients of a backend that left move to the others.
func TestProxyRelaysUDPPerClient(t *testing.T) {
	front := freeUDPAddr(t)
	p := newProxy(t, time.Minute)
	a, b := udpBackend(t, "a"), udpBackend(t, "b")
	if err := p.Set("ns/dns", []Frontend{udpFrontend(front, a, b)}); err != nil {
		t.Fatal(err)
	}
	c1, c2 := udpClient(t, front), udpClient(t, front)
	first := map[*net.UDPConn]string{}
	for _, c := range []*net.UDPConn{c1, c2} {
		for i := range 3 {
			got, err := ask(c, "q")
			if err != nil {
				t.Fatalf("a client's datagram through the proxy: %v", err)
			}
			name, _, _ := strings.Cut(got, ":")
			if i == 0 {
				first[c] = name
			} else if name != first[c] {
				t.Errorf("a client's datagrams went to %s, then to %s", first[c], name)
			}
		}
	}
	if first[c1] == first[c2] {
		t.Errorf("both clients went to backend %s, want one each", first[c1])
	}
	left := map[string]netip.AddrPort{"a": b, "b": a}[first[c1]] // keep the backend c1 does not use
	if err := p.Set("ns/dns", []Frontend{udpFrontend(front, left)}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "b", "b": "a"}[first[c1]]
	for _, c := range []*net.UDPConn{c1, c2} {
		if got, err := ask(c, "q"); err != nil || !strings.HasPrefix(got, want+":") {
			t.Errorf("after the change a client got %q (%v), want an answer of %s", got, err, want)
		}
	}
}

// Tests that a UDP frontend without backends is refused (port unreachable), as it is once no
// longer served.
func TestProxyRefusesUDPWithoutBackends(t *testing.T) {
	front := freeUDPAddr(t)
	p := newProxy(t, time.Minute)
	if err := p.Set("ns/dns", []Frontend{udpFrontend(front, udpBackend(t, "a"))}); err != nil {
		t.Fatal(err)
	}
	c := udpClient(t, front)
	if got, err := ask(c, "q"); got != "a:q" {
		t.Fatalf("the served frontend answers %q, %v", got, err)
	}
	if err := p.Set("ns/dns", []Frontend{udpFrontend(front)}); err != nil {
		t.Fatal(err)
	}
	if _, err := ask(c, "q"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("a frontend without backends: %v, want connection refused", err)
	}
}
