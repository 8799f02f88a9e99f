package dataplane_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/listener"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// udpEcho answers every datagram with "<name> got <payload> from <client>".
func udpEcho(t *testing.T, name string) string {
	t.Helper()
	pc, err := (&net.ListenConfig{}).ListenPacket(context.Background(), "udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(fmt.Appendf(nil, "%s got %s from %s", name, buf[:n], from), from)
		}
	}()
	return pc.LocalAddr().String()
}

// udpPort applies a UDP listener on port 5353 whose one route goes to backend.
func udpPort(t *testing.T, d *dataplane.DataPlane, route, backend string) string {
	t.Helper()
	apply(t, d,
		snaptest.Listener("ns/gw", 5353, discoveryv1.Protocol_PROTOCOL_UDP,
			snaptest.VHost("udp", "", snaptest.Route(route, "", snaptest.Prefix("/"), "ns/dns:53"))),
		snaptest.Cluster(t, "ns/dns:53", backend))
	return addr(t, d, 5353)
}

// udpClient opens a client socket to addr.
func udpClient(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := (&net.Dialer{}).DialContext(context.Background(), "udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// exchange sends payload and returns the answer, or "" when none came within wait.
func exchange(t *testing.T, c net.Conn, payload string, wait time.Duration) string {
	t.Helper()
	if _, err := c.Write([]byte(payload)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 2048)
	n, err := c.Read(buf)
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

// Tests that a UDP port forwards each client's datagrams through a flow of its own: the backend
// sees one source address per client, the same for every datagram of that client, and the
// answers come back to the client that asked.
func TestUDPFlowPerClient(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	d := start(t, dataplane.Options{Registerer: reg})
	proxy := udpPort(t, d, "ns/dns/0/0", udpEcho(t, "dns"))
	a, b := udpClient(t, proxy), udpClient(t, proxy)
	first := exchange(t, a, "a1", 5*time.Second)
	if first == "" {
		t.Fatal("no answer to client a")
	}
	if again := exchange(t, a, "a2", 5*time.Second); again[len("dns got a2"):] != first[len("dns got a1"):] {
		t.Errorf("client a's datagrams left from two sources: %q then %q", first, again)
	}
	fromB := exchange(t, b, "b1", 5*time.Second)
	if fromB == "" || fromB[len("dns got b1"):] == first[len("dns got a1"):] {
		t.Errorf("client b shares client a's flow: %q and %q", fromB, first)
	}
	if got := metricSum(t, reg, "coxswain_proxy_udp_flows_total", "outcome", "opened"); got != 2 {
		t.Errorf("flows opened %v, want 2", got)
	}
	eventually(t, "bytes counted both ways", func() bool {
		return metricSum(t, reg, "coxswain_proxy_passthrough_bytes_total", "direction", "upstream") == 6 &&
			metricSum(t, reg, "coxswain_proxy_passthrough_bytes_total", "direction", "downstream") > 6
	})
}

// Tests the flow limit against a flood from many source addresses (here ports): beyond
// --max-udp-flows a datagram that would open a flow is dropped and counted, and the flows open
// keep working; an idle flow ends, giving its place back.
func TestUDPFlowLimitAndIdleTimeout(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	d := start(t, dataplane.Options{Registerer: reg, Listener: listener.Options{MaxUDPFlows: 3, UDPIdleTimeout: 2 * time.Second}})
	proxy := udpPort(t, d, "ns/dns/0/0", udpEcho(t, "dns"))
	var clients []net.Conn
	for i := range 3 {
		c := udpClient(t, proxy)
		if exchange(t, c, fmt.Sprint(i), 5*time.Second) == "" {
			t.Fatalf("client %d got no answer", i)
		}
		clients = append(clients, c)
	}
	for range 20 {
		if got := exchange(t, udpClient(t, proxy), "flood", 20*time.Millisecond); got != "" {
			t.Fatalf("a datagram beyond the flow limit was answered: %q", got)
		}
	}
	if got := metricSum(t, reg, "coxswain_proxy_udp_flows_total", "outcome", "flow_limit"); got != 20 {
		t.Errorf("flows refused %v, want 20", got)
	}
	if exchange(t, clients[0], "still", 5*time.Second) == "" {
		t.Error("an open flow stopped answering during the flood")
	}
	// Once the flows are idle past the timeout their places are free again.
	time.Sleep(3 * time.Second)
	if exchange(t, udpClient(t, proxy), "later", 5*time.Second) == "" {
		t.Error("no flow opened after the idle ones ended")
	}
}

// Tests that a flow ends when its route leaves: the client's next datagram opens a flow on the
// route that replaced it.
func TestUDPFlowEndsWhenItsRouteLeaves(t *testing.T) {
	t.Parallel()
	d := start(t, dataplane.Options{})
	proxy := udpPort(t, d, "ns/old/0/0", udpEcho(t, "old"))
	c := udpClient(t, proxy)
	if got := exchange(t, c, "x", 5*time.Second); len(got) < 3 || got[:3] != "old" {
		t.Fatalf("first answer %q, want one from old", got)
	}
	udpPort(t, d, "ns/new/0/0", udpEcho(t, "new"))
	if got := exchange(t, c, "y", 5*time.Second); len(got) < 3 || got[:3] != "new" {
		t.Fatalf("after the route changed: %q, want an answer from new", got)
	}
}
