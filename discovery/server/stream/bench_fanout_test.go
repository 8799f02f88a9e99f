//go:build linux

package stream

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/client"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/servertest"
	"coxswain.dev/coxswain/discovery/tlsconfig"
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
// one route, and the server stamps each ACK as gRPC hands it over. Reports publish-to-ACK p50 and
// p99 over every ACK of COXSWAIN_BENCH_ROUNDS (20) rounds, the median of each round's last ACK,
// and the CPU of the server process and of this one per round.
func TestBenchFanoutDelta(t *testing.T) {
	skipUnlessBench(t)
	proxies := benchInt(t, "COXSWAIN_BENCH_PROXIES", 1000)
	rounds := benchInt(t, "COXSWAIN_BENCH_ROUNDS", 20)
	c := startBenchChild(t, 1)
	first := c.ask("version")
	controller := spiffeid.RequireFromString(servertest.ControllerID)

	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	started := time.Now()
	for batch := 0; batch < proxies; batch += 50 {
		for i := batch; i < min(batch+50, proxies); i++ {
			cfg := client.StreamConfig{
				Address: "passthrough:///" + c.addr, NodeID: "proxy-" + strconv.Itoa(i), Scope: fanoutScope.Proto(),
				TLS: client.StreamTLS(tlsconfig.NewRotatingCertificate(c.pki.SVID(t, fanoutID)), c.pki.Bundle, controller),
			}
			wg.Go(func() {
				var held client.Resources
				err := client.Run(ctx, cfg, func(_ context.Context, snap *discoveryv1.Snapshot) error {
					held = held.Apply(snap)
					return nil
				})
				if ctx.Err() == nil {
					t.Errorf("proxy %s: %v", cfg.NodeID, err)
				}
			})
		}
		c.ask("acks " + first + " " + strconv.Itoa(min(batch+50, proxies)))
	}
	t.Logf("%d proxies connected and acknowledged the first snapshot in %s", proxies, time.Since(started).Round(time.Millisecond))

	var all, last []time.Duration
	serverCPU, clientCPU, wall0 := c.usage(), processCPU(t), time.Now()
	for r := range rounds {
		version := c.ask("publish " + strconv.Itoa(r+1))
		var round []time.Duration
		for _, f := range strings.Fields(c.ask("acks " + version + " " + strconv.Itoa(proxies))) {
			n, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			round = append(round, time.Duration(n))
		}
		slices.Sort(round)
		all = append(all, round...)
		last = append(last, round[len(round)-1])
	}
	serverCPU, clientCPU = c.usage()-serverCPU, processCPU(t)-clientCPU
	wall := time.Since(wall0)
	slices.Sort(all)
	slices.Sort(last)
	perRound := func(d time.Duration) time.Duration { return (d / time.Duration(rounds)).Round(time.Microsecond) }
	t.Logf("CPU per round: server process %s (%s per proxy), the %d proxies %s; wall time per round %s",
		perRound(serverCPU), (serverCPU / time.Duration(rounds*proxies)).Round(100*time.Nanosecond), proxies, perRound(clientCPU), perRound(wall))
	t.Logf("fan-out of a one-route delta to %d proxies, %d rounds: publish-to-ACK p50 %s, p99 %s, max %s; last ACK of a round: median %s, worst %s (target p99 <= 100ms: %s)",
		proxies, rounds, percentile(all, 50).Round(time.Microsecond), percentile(all, 99).Round(time.Microsecond),
		all[len(all)-1].Round(time.Microsecond), percentile(last, 50).Round(time.Microsecond), last[len(last)-1].Round(time.Microsecond),
		verdict(percentile(all, 99) <= 100*time.Millisecond))
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
