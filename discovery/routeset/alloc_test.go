package routeset_test

import (
	"fmt"
	"runtime"
	"testing"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/routeset"
)

// manyVirtualHosts returns a listener of n virtual hosts, each with its own hostname and one
// route of that hostname: the listener of a Gateway port shared by n listeners of ListenerSets.
func manyVirtualHosts(n int) *discoveryv1.Listener {
	l := &discoveryv1.Listener{Name: "tenant/gw/80", Port: 80, Protocol: discoveryv1.Protocol_PROTOCOL_HTTP}
	for i := range n {
		host := fmt.Sprintf("h%d.tenant.example.com", i)
		l.VirtualHosts = append(l.VirtualHosts, &discoveryv1.VirtualHost{
			Name: fmt.Sprintf("tenant/set-%d/l%d", i/64, i%64), Hostname: host,
			Routes: []*discoveryv1.Route{{
				Name: fmt.Sprintf("tenant/r%d/0/0", i), Hostname: host,
				Match:    &discoveryv1.RouteMatch{Path: &discoveryv1.PathMatch{Type: discoveryv1.MatchType_MATCH_TYPE_PATH_PREFIX, Value: "/"}},
				Backends: []*discoveryv1.WeightedBackend{{Cluster: "tenant/app:80", Weight: 1}},
			}},
		})
	}
	return l
}

// allocatedBy returns the fewest bytes f allocated in three calls.
func allocatedBy(f func()) uint64 {
	least := ^uint64(0)
	for range 3 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}

// maxAllocPerInputByte bounds what Assemble and Inline may allocate for each byte of their
// input: the result (about one byte per input byte) and the indexes of the sets.
const maxAllocPerInputByte = 4

// Tests that assembling a listener allocates in proportion to its encoding and its sets', at 64
// virtual hosts and at 6,400 (100 ListenerSets of 64 listeners on one port): an allocation per
// virtual host sized by the number of sets grows with their square, and fails at the larger.
func TestAssembleAllocatesInProportionToItsInput(t *testing.T) {
	for _, n := range []int{64, 6400} {
		l := manyVirtualHosts(n)
		head, sets := routeset.Split(l)
		in := setsOf(t, sets)
		listener := marshal(t, head)
		size := len(listener)
		for _, s := range in {
			size += len(s.Payload)
		}
		got := allocatedBy(func() {
			if _, err := routeset.Assemble(l.GetName(), listener, in); err != nil {
				t.Fatal(err)
			}
		})
		per := float64(got) / float64(size)
		t.Logf("%d virtual hosts: %d bytes in, %d allocated, %.2f a byte", n, size, got, per)
		if per > maxAllocPerInputByte {
			t.Errorf("%d virtual hosts: assembling %d bytes allocated %d, %.1f a byte; want at most %d",
				n, size, got, per, maxAllocPerInputByte)
		}
	}
}
