package dataplane_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/listener"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// udpClientFrom opens a client socket from local (an IP address of the loopback) to addr.
func udpClientFrom(t *testing.T, local, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(local), 0))}
	c, err := d.DialContext(context.Background(), "udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// memory is what the runtime holds in goroutine stacks and live heap, after two collections
// (the second empties the buffer pools the first moved aside).
func memory() (stacks, heap uint64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.StackInuse, m.HeapAlloc
}

// Tests what an idle UDP flow costs, against a host opening many from one address: 2,000 flows,
// each answered once (so that each flow's path back to its client ran), hold less than 16 KiB
// of goroutine stack and 16 KiB of heap each once idle. A flow that kept a 64 KiB datagram
// buffer while waiting for its backend (on its stack, which then grows to 128 KiB, or on the
// heap) fails it: 16,384 such flows are 2 GiB. Not parallel: it measures the process's memory.
func TestUDPIdleFlowsHoldNoBuffer(t *testing.T) {
	const flows = 2000
	d := start(t, dataplane.Options{Listener: listener.Options{MaxUDPFlowsPerClient: flows + 1, MaxUDPFlowsPerListener: flows + 1}})
	proxy := udpPort(t, d, "ns/dns/0/0", udpEcho(t, "dns"))
	// One flow first, so that what every flow shares (the pool's first buffers, the route's
	// counters) is in the baseline.
	if exchange(t, udpClient(t, proxy), "first", 5*time.Second) == "" {
		t.Fatal("no answer")
	}
	stacks, heap := memory()
	for i := range flows {
		if exchange(t, udpClient(t, proxy), fmt.Sprint(i), 5*time.Second) == "" {
			t.Fatalf("flow %d got no answer", i)
		}
	}
	stacksAfter, heapAfter := memory()
	perStack := (int64(stacksAfter) - int64(stacks)) / flows
	perHeap := (int64(heapAfter) - int64(heap)) / flows
	t.Logf("an idle flow holds %d bytes of stack and %d bytes of heap (the test's own client socket included)", perStack, perHeap)
	if perStack > 16<<10 {
		t.Errorf("an idle flow holds %d bytes of goroutine stack, want at most 16 KiB", perStack)
	}
	if perHeap > 16<<10 {
		t.Errorf("an idle flow holds %d bytes of heap, want at most 16 KiB", perHeap)
	}
}

// Tests that one client address cannot take every flow: opening flows from many of its ports,
// it gets --max-udp-flows-per-client of them, its datagrams that would open more are dropped
// and counted, its open flows keep working, and another address still opens flows.
func TestUDPFlowsPerClientAddress(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	d := start(t, dataplane.Options{Registerer: reg, Listener: listener.Options{MaxUDPFlows: 100, MaxUDPFlowsPerClient: 5}})
	proxy := udpPort(t, d, "ns/dns/0/0", udpEcho(t, "dns"))
	var open []net.Conn
	for i := range 5 {
		c := udpClientFrom(t, "127.0.0.1", proxy)
		if exchange(t, c, fmt.Sprint(i), 5*time.Second) == "" {
			t.Fatalf("flow %d of the client's share got no answer", i)
		}
		open = append(open, c)
	}
	for range 10 {
		if got := exchange(t, udpClientFrom(t, "127.0.0.1", proxy), "more", 20*time.Millisecond); got != "" {
			t.Fatalf("a flow beyond the client's share was answered: %q", got)
		}
	}
	if got := metricSum(t, reg, "coxswain_proxy_udp_flows_total", "outcome", "client_flow_limit"); got != 10 {
		t.Errorf("flows refused for the client's share: %v, want 10", got)
	}
	if exchange(t, open[0], "still", 5*time.Second) == "" {
		t.Error("an open flow of the client stopped answering")
	}
	if exchange(t, udpClientFrom(t, "127.0.0.2", proxy), "other", 5*time.Second) == "" {
		t.Error("another client address got no flow while the first held its share")
	}
}

// Tests that one UDP listener cannot take every flow of the proxy: with its share full
// (--max-udp-flows-per-listener), a datagram that would open one more on it is dropped and
// counted, and another listener (another Gateway's, on the shared pool) still opens flows.
func TestUDPFlowsPerListener(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	d := start(t, dataplane.Options{Registerer: reg, Listener: listener.Options{MaxUDPFlows: 100, MaxUDPFlowsPerListener: 4}})
	echo := udpEcho(t, "dns")
	udpListener := func(gateway string, port uint32) *discoveryv1.Listener {
		return snaptest.Listener(gateway, port, discoveryv1.Protocol_PROTOCOL_UDP,
			snaptest.VHost("udp", "", snaptest.Route(gateway+"/0/0", "", snaptest.Prefix("/"), "ns/dns:53")))
	}
	apply(t, d, udpListener("ns/a", 5353), udpListener("ns/b", 5354), snaptest.Cluster(t, "ns/dns:53", echo))
	full, other := addr(t, d, 5353), addr(t, d, 5354)
	for i := range 4 {
		// From four addresses, so that no client's share is what runs out.
		if exchange(t, udpClientFrom(t, fmt.Sprintf("127.0.0.%d", i+1), full), "x", 5*time.Second) == "" {
			t.Fatalf("flow %d got no answer", i)
		}
	}
	if got := exchange(t, udpClientFrom(t, "127.0.0.5", full), "more", 20*time.Millisecond); got != "" {
		t.Fatalf("a flow beyond the listener's share was answered: %q", got)
	}
	if got := metricSum(t, reg, "coxswain_proxy_udp_flows_total", "outcome", "listener_flow_limit"); got != 1 {
		t.Errorf("flows refused for the listener's share: %v, want 1", got)
	}
	if exchange(t, udpClientFrom(t, "127.0.0.5", other), "other", 5*time.Second) == "" {
		t.Error("another listener got no flow while the first held its share")
	}
}

// Tests the overload manager on UDP: above the memory watermark a datagram that would open a
// flow is dropped and counted (kind udp_flow), the flows open keep working, and once memory is
// back under the watermark flows open again. Not parallel: it moves the process's heap.
func TestUDPFlowsRefusedWhenOverloaded(t *testing.T) {
	reg := prometheus.NewRegistry()
	d := start(t, dataplane.Options{Registerer: reg, MemoryWatermark: liveHeap() + 64<<20})
	proxy := udpPort(t, d, "ns/dns/0/0", udpEcho(t, "dns"))
	kept := udpClient(t, proxy)
	if exchange(t, kept, "before", 5*time.Second) == "" {
		t.Fatal("no answer before the ballast")
	}
	relieve := overload(t, reg)
	if got := exchange(t, udpClient(t, proxy), "new", 100*time.Millisecond); got != "" {
		t.Errorf("a new flow above the watermark was answered: %q", got)
	}
	if got := metricValue(t, reg, "coxswain_proxy_overload_refused_total", "udp_flow"); got != 1 {
		t.Errorf("overload_refused_total{kind=udp_flow} = %v, want 1", got)
	}
	if exchange(t, kept, "during", 5*time.Second) == "" {
		t.Error("an open flow stopped answering above the watermark")
	}
	relieve()
	if exchange(t, udpClient(t, proxy), "after", 5*time.Second) == "" {
		t.Error("no flow opened under the watermark again")
	}
}
