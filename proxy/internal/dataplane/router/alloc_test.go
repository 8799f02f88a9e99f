package router

import (
	"fmt"
	"runtime"
	"testing"

	"google.golang.org/protobuf/types/known/anypb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/routeset"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// manyVirtualHosts returns the resources of a port of n virtual hosts, each with its own
// hostname and one route, in route sets: what the shared pool receives for a Gateway port
// shared by the listeners of many ListenerSets.
func manyVirtualHosts(t *testing.T, n int) []*discoveryv1.Resource {
	t.Helper()
	vhs := make([]*discoveryv1.VirtualHost, 0, n)
	for i := range n {
		host := fmt.Sprintf("h%d.tenant.example.com", i)
		vhs = append(vhs, snaptest.VHost(fmt.Sprintf("tenant/set-%d/l%d", i/64, i%64), host,
			snaptest.Route(fmt.Sprintf("tenant/r%d/0/0", i), host, snaptest.Prefix("/"), "tenant/c")))
	}
	head, sets := routeset.Split(snaptest.HTTP("tenant/gw", 80, vhs...))
	res := snaptest.Resources(t, snaptest.Cluster(t, "tenant/c", "10.0.0.1:80"), head)
	for _, s := range sets {
		a, err := anypb.New(s)
		if err != nil {
			t.Fatal(err)
		}
		res = append(res, &discoveryv1.Resource{Key: routeset.Key(s.GetListener(), s.GetVirtualHost(), s.GetHostname()), Payload: a})
	}
	return res
}

// maxCompileAllocPerByte bounds what compiling a resource set may allocate for each byte of its
// payloads: the decoded routes, their matchers and the table.
const maxCompileAllocPerByte = 32

// Tests that compiling a port of 64 virtual hosts and one of 6,400 (100 ListenerSets of 64
// listeners) from their route sets allocates in proportion to the payloads: assembling the
// listener with room for every set in every virtual host made the larger take about 1 GiB.
func TestCompileAllocatesInProportionToManyVirtualHosts(t *testing.T) {
	for _, n := range []int{64, 6400} {
		res := manyVirtualHosts(t, n)
		size := 0
		for _, r := range res {
			size += len(r.GetPayload().GetValue())
		}
		got := ^uint64(0) // the least of three compiles, should another goroutine allocate meanwhile
		for range 3 {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			if _, err := Compile(snaptest.Seq(res)); err != nil {
				t.Fatal(err)
			}
			runtime.ReadMemStats(&after)
			got = min(got, after.TotalAlloc-before.TotalAlloc)
		}
		per := float64(got) / float64(size)
		t.Logf("%d virtual hosts: %d bytes of payloads, %d allocated, %.1f a byte", n, size, got, per)
		if per > maxCompileAllocPerByte {
			t.Errorf("%d virtual hosts: compiling %d bytes allocated %d, %.1f a byte; want at most %d", n, size, got, per, maxCompileAllocPerByte)
		}
	}
}
