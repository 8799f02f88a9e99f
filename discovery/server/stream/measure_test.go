package stream

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
)

// heapInUse returns the bytes of the heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// Measures the heap of the stream listener's process while one identity opens 1,000 streams that
// read and ACK a 2 MiB snapshot and 100 that never read. Client and server share the process, so
// the figure includes the clients' side. Set COXSWAIN_MEASURE=1 to run it, and
// COXSWAIN_MEASURE_CAP to lift the per-identity cap (as before it existed).
func TestMeasureStreamsOfOneIdentity(t *testing.T) {
	if os.Getenv("COXSWAIN_MEASURE") == "" {
		t.Skip("set COXSWAIN_MEASURE=1 to measure")
	}
	limit := DefaultMaxStreamsPerIdentity
	if v := os.Getenv("COXSWAIN_MEASURE_CAP"); v != "" {
		limit, _ = strconv.Atoi(v)
	}
	idle, sleepers := 1000, 100
	if v := os.Getenv("COXSWAIN_MEASURE_IDLE"); v != "" {
		idle, _ = strconv.Atoi(v)
	}
	ackTimeout := DefaultAckTimeout
	if v := os.Getenv("COXSWAIN_MEASURE_ACK_TIMEOUT"); v != "" {
		ackTimeout, _ = time.ParseDuration(v)
	}
	e := newEnv(t, func(c *Config) { c.MaxStreamsPerIdentity, c.MaxStreams, c.AckTimeout = limit, 10000, ackTimeout })
	e.set(t, webScope, map[string]string{"listener": strings.Repeat("k", 2<<20)})
	cert := e.pki.SVID(t, webID)
	before := heapInUse()

	var admitted, refused sync.WaitGroup
	var mu sync.Mutex
	codesSeen := map[codes.Code]int{}
	record := func(err error) {
		mu.Lock()
		codesSeen[status.Code(err)]++
		mu.Unlock()
	}
	var clients []discoveryv1.DiscoveryClient
	for i := range (idle+sleepers)/maxConcurrentStreams + 1 {
		_ = i
		clients = append(clients, e.client(t, cert))
	}
	start := time.Now()
	for i := range idle {
		admitted.Go(func() {
			p := open(t, clients[i/maxConcurrentStreams], subscribeMessage("idle-"+strconv.Itoa(i), webScope))
			snap, err := p.recv()
			if err != nil {
				record(err)
				return
			}
			record(nil)
			p.ack(snap)
		})
	}
	admitted.Wait()
	for i := range sleepers {
		refused.Go(func() {
			j := idle + i
			open(t, clients[j/maxConcurrentStreams], subscribeMessage("sleeper-"+strconv.Itoa(i), webScope))
		})
	}
	refused.Wait()
	waitFor(t, "every stream answered or refused", func() bool {
		return testutil.ToFloat64(e.srv.metrics.denied.WithLabelValues(string(ReasonTooManyStreams)))+
			float64(len(e.srv.live())) >= float64(idle+sleepers)
	})
	during := heapInUse()
	t.Logf("cap %d: %d idle + %d never-reading streams of one identity in %s: live %d, refused TooManyStreams %v, idle results %v",
		limit, idle, sleepers, time.Since(start).Round(time.Millisecond), len(e.srv.live()),
		testutil.ToFloat64(e.srv.metrics.denied.WithLabelValues(string(ReasonTooManyStreams))), codesSeen)
	t.Logf("heap in use: before %.1f MiB, with the streams %.1f MiB (+%.1f MiB)",
		float64(before)/(1<<20), float64(during)/(1<<20), (float64(during)-float64(before))/(1<<20))
	waitFor(t, "the never-reading streams to reach their ACK deadline", func() bool {
		return testutil.ToFloat64(e.srv.metrics.denied.WithLabelValues(string(ReasonAckTimeout))) > 0 &&
			len(e.srv.live()) <= idle
	})
	t.Logf("heap in use after the ACK deadline (%s) closed the never-reading streams: %.1f MiB",
		ackTimeout, float64(heapInUse())/(1<<20))
}
