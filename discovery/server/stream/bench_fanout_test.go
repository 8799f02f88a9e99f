//go:build linux

package stream

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/cache"
)

// benchEnv gates the control-plane benchmarks: they take minutes and most of the machine.
const benchEnv = "COXSWAIN_BENCH"

func skipUnlessBench(t *testing.T) {
	t.Helper()
	if os.Getenv(benchEnv) == "" {
		t.Skip("set " + benchEnv + "=1 to run the control-plane benchmarks (make bench-control-plane)")
	}
}

// benchInt returns the integer in the environment variable name, or def.
func benchInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// pollFor polls cond every 5 ms until it holds or timeout passes.
func pollFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ackClock records when the server receives each ACK, by version, and when each snapshot send
// returned (gRPC took the message: it waits only for flow control, not for the socket).
type ackClock struct {
	mu    sync.Mutex
	at    map[string][]time.Time
	sends []time.Time
}

// sentSince returns the times of the sends that returned after since.
func (c *ackClock) sentSince(since time.Time) []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	i, _ := slices.BinarySearchFunc(c.sends, since, time.Time.Compare)
	return slices.Clone(c.sends[i:])
}

func (c *ackClock) count(version string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.at[version])
}

func (c *ackClock) times(version string) []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.at[version])
}

// interceptor stamps every ACK as gRPC hands it to the session.
func (c *ackClock) interceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, &clockedStream{ServerStream: ss, clock: c})
	}
}

type clockedStream struct {
	grpc.ServerStream
	clock *ackClock
}

func (s *clockedStream) SendMsg(m any) error {
	err := s.ServerStream.SendMsg(m)
	if _, ok := m.(*frame); ok && err == nil {
		now := time.Now()
		s.clock.mu.Lock()
		// Appended in order of the clock, as sentSince's search needs, under the lock.
		if n := len(s.clock.sends); n > 0 && now.Before(s.clock.sends[n-1]) {
			now = s.clock.sends[n-1]
		}
		s.clock.sends = append(s.clock.sends, now)
		s.clock.mu.Unlock()
	}
	return err
}

func (s *clockedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if msg, ok := m.(*discoveryv1.ClientMessage); ok && err == nil && msg.GetAck() != nil {
		now := time.Now()
		s.clock.mu.Lock()
		s.clock.at[msg.GetAck().GetVersion()] = append(s.clock.at[msg.GetAck().GetVersion()], now)
		s.clock.mu.Unlock()
	}
	return err
}

// routes returns n route resources of about 500 bytes; the one numbered changed carries rev.
func routes(t *testing.T, n, changed, rev int) []*discoveryv1.Resource {
	t.Helper()
	out := make([]*discoveryv1.Resource, 0, n)
	for i := range n {
		v := fmt.Sprintf("route %d: %s", i, strings.Repeat("r", 480))
		if i == changed {
			v += " rev " + strconv.Itoa(rev)
		}
		r, err := cache.NewResource(fmt.Sprintf("route/%04d", i), wrapperspb.String(v))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// percentile returns the p-th percentile (0 < p <= 100) of sorted durations, nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Measures the fan-out of a one-route delta: COXSWAIN_BENCH_PROXIES (1000) discovery clients in
// this process, each on its own mTLS connection with its own SVID, subscribe to one Gateway
// scope of 100 routes served by the stream server in a process of its own; every round changes
// one route, and the server stamps each ACK as gRPC hands it over (see fleet). Reports
// publish-to-ACK p50 and p99 over every ACK of COXSWAIN_BENCH_ROUNDS (20) rounds, the last ACK
// of each round, and the CPU of the server process and of this one per round.
// TestBenchFanoutPerStream takes the server's CPU per stream from the same rounds at two sizes.
func TestBenchFanoutDelta(t *testing.T) {
	skipUnlessBench(t)
	proxies := benchInt(t, "COXSWAIN_BENCH_PROXIES", 1000)
	rounds := benchInt(t, "COXSWAIN_BENCH_ROUNDS", 20)
	f := newFleet(t, startBenchChild(t, 1))
	took := f.grow(proxies, 50)
	t.Logf("%d proxies connected and acknowledged the first snapshot in %s", proxies, took.Round(time.Millisecond))
	r := f.rounds(rounds, 1)
	t.Logf("fan-out of a one-route delta: %s (target p99 <= 100ms: %s)", r, verdict(percentile(r.acks, 99) <= 100*time.Millisecond))
}

// processCPU returns the user and system CPU time this process used so far.
func processCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}
