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

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
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

// ackClock records when the server receives each ACK, by version.
type ackClock struct {
	mu sync.Mutex
	at map[string][]time.Time
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
// this process, each on its own mTLS connection with its own SVID, subscribe to the shared pool
// (100 routes); every round changes one route, and the server stamps each ACK as it arrives.
// Reports publish-to-ACK p50 and p99 over every ACK of COXSWAIN_BENCH_ROUNDS (20) rounds, and
// the median of each round's last ACK.
func TestBenchFanoutDelta(t *testing.T) {
	skipUnlessBench(t)
	proxies := benchInt(t, "COXSWAIN_BENCH_PROXIES", 1000)
	rounds := benchInt(t, "COXSWAIN_BENCH_ROUNDS", 20)
	const nRoutes = 100
	p := servertest.NewPKI(t)
	snapshots := cache.New(nil)
	srv, err := New(Config{
		TrustDomain: p.TD, Bundles: p.Bundle, Cache: snapshots, Scopes: &scopeTable{sas: map[string]string{}},
		MaxStreamsPerIdentity: proxies, MaxStreams: proxies + 16, MaxConnections: proxies + 16,
		Registerer: prometheus.NewRegistry(), Logger: logr.Discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	clock := &ackClock{at: map[string][]time.Time{}}
	gs, err := srv.NewGRPCServer(p.StreamServerTLS(), grpc.ChainStreamInterceptor(clock.interceptor()))
	if err != nil {
		t.Fatal(err)
	}
	addr := servertest.Serve(t, gs)
	if _, err := snapshots.Set(cache.SharedPool(), routes(t, nRoutes, -1, 0)); err != nil {
		t.Fatal(err)
	}
	first := snapshots.Get(cache.SharedPool()).Version()

	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	started := time.Now()
	for batch := 0; batch < proxies; batch += 50 {
		for i := batch; i < min(batch+50, proxies); i++ {
			cfg := client.StreamConfig{
				Address: "passthrough:///" + addr, NodeID: "proxy-" + strconv.Itoa(i), Scope: cache.SharedPool().Proto(),
				TLS: client.StreamTLS(tlsconfig.NewRotatingCertificate(p.SVID(t, sharedID)), p.Bundle, spiffeid.RequireFromString(servertest.ControllerID)),
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
		pollFor(t, "a batch of proxies to ACK", time.Minute, func() bool { return clock.count(first) >= min(batch+50, proxies) })
	}
	t.Logf("%d proxies connected and acknowledged the first snapshot in %s", proxies, time.Since(started).Round(time.Millisecond))

	var all, last []time.Duration
	cpu0, wall0 := processCPU(t), time.Now()
	for r := range rounds {
		resources := routes(t, nRoutes, r%nRoutes, r+1)
		published := time.Now()
		if _, err := snapshots.Set(cache.SharedPool(), resources); err != nil {
			t.Fatal(err)
		}
		version := snapshots.Get(cache.SharedPool()).Version()
		pollFor(t, "every proxy to ACK round "+strconv.Itoa(r), time.Minute, func() bool { return clock.count(version) == proxies })
		var round []time.Duration
		for _, at := range clock.times(version) {
			round = append(round, at.Sub(published))
		}
		slices.Sort(round)
		all = append(all, round...)
		last = append(last, round[len(round)-1])
	}
	cpu, wall := processCPU(t)-cpu0, time.Since(wall0)
	slices.Sort(all)
	slices.Sort(last)
	t.Logf("CPU of this process (server and proxies together) per round: %s over %s of wall time per round (%.2f cores busy)",
		(cpu / time.Duration(rounds)).Round(time.Microsecond), (wall / time.Duration(rounds)).Round(time.Microsecond), cpu.Seconds()/wall.Seconds())
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
