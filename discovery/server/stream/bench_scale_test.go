//go:build linux

package stream

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/client"
	"coxswain.dev/coxswain/discovery/server/servertest"
	"coxswain.dev/coxswain/discovery/tlsconfig"
)

// benchPinEnv, set in the server process's environment to a CPU number, pins that process to
// the CPU; the fan-out benchmark pins the agents to another (COXSWAIN_BENCH_PIN=1).
const benchPinEnv = "COXSWAIN_BENCH_SERVER_PIN"

// benchServing is the stream server of the benchmarks' server process, as the operator serves
// it: behind its connection caps (Listener), on an address that a restart keeps.
type benchServing struct {
	cfg  Config
	srv  *Server
	gs   *grpc.Server
	addr string
	done chan error
}

// serveBench starts a Server of cfg, with a registry of its own, on addr.
func serveBench(t *testing.T, cfg Config, p *servertest.PKI, clock *ackClock, addr string) *benchServing {
	t.Helper()
	cfg.Registerer = prometheus.NewRegistry()
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gs, err := srv.NewGRPCServer(p.StreamServerTLS(), grpc.ChainStreamInterceptor(clock.interceptor()))
	if err != nil {
		t.Fatal(err)
	}
	var lis net.Listener
	// The port of a listener just closed can be taken again at once (SO_REUSEADDR), but the
	// close of its last connections may still be under way: a few retries.
	for attempt := 0; ; attempt++ {
		lis, err = (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
		if err == nil {
			break
		}
		if attempt == 50 {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // waiting for the kernel, not for a goroutine
	}
	b := &benchServing{cfg: cfg, srv: srv, gs: gs, addr: lis.Addr().String(), done: make(chan error, 1)}
	go func() { b.done <- gs.Serve(srv.Listener(lis)) }()
	return b
}

// stop closes the listener and every connection and returns once every handler has.
func (b *benchServing) stop(t *testing.T) {
	t.Helper()
	if b.done == nil {
		return
	}
	b.gs.Stop()
	if err := <-b.done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		t.Errorf("serve: %v", err)
	}
	b.done = nil
}

// pinProcess pins every thread of this process, and so every thread they start, to the CPUs
// in list (comma-separated numbers).
func pinProcess(t *testing.T, list string) {
	t.Helper()
	var mask [16]uint64
	for f := range strings.SplitSeq(list, ",") {
		cpu, err := strconv.Atoi(f)
		if err != nil || cpu < 0 || cpu >= 64*len(mask) {
			t.Fatalf("CPU %q", f)
		}
		mask[cpu/64] |= 1 << (cpu % 64)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		if _, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, uintptr(tid), unsafe.Sizeof(mask), uintptr(unsafe.Pointer(&mask))); errno != 0 && errno != syscall.ESRCH {
			t.Fatalf("sched_setaffinity %d: %v", tid, errno)
		}
	}
}

// fleet is a set of discovery clients in this process, each on its own mTLS connection with its
// own SVID, subscribed to the fan-out scope of a server process. Each runs client.Run (the
// proxy's stream loop) under the proxy's reconnect policy: a jittered exponential backoff from
// 250 ms to 30 s (proxy/internal/agent.DefaultBackoff), reset by a snapshot.
type fleet struct {
	t       *testing.T
	c       *benchChild
	ctx     context.Context
	wg      sync.WaitGroup
	clients []*fleetClient
	// generation counts the restarts the test made; fulls counts the clients that received a
	// full snapshot in the current generation.
	generation atomic.Int64
	fulls      atomic.Int64
	// attempts counts the streams opened, failures those that ended in error, by gRPC code.
	attempts atomic.Int64
	mu       sync.Mutex
	failures map[string]int
	// examples holds the first error of each code.
	examples []string
	// dial are the clients' extra dial options.
	dial []grpc.DialOption
}

type fleetClient struct {
	// fullIn is the generation in which the client last received a full snapshot, from 1.
	fullIn atomic.Int64
	// last is the client's last stream error, under fleet.mu.
	last string
}

func newFleet(t *testing.T, c *benchChild) *fleet {
	ctx, cancel := context.WithCancel(t.Context())
	f := &fleet{t: t, c: c, ctx: ctx, failures: map[string]int{}}
	f.generation.Store(1)
	t.Cleanup(func() {
		cancel()
		f.wg.Wait()
	})
	return f
}

// grow starts clients until there are n, in batches of batch, each waited for until every
// client in it received its first full snapshot.
func (f *fleet) grow(n, batch int) time.Duration {
	start := time.Now()
	controller := spiffeid.RequireFromString(servertest.ControllerID)
	for len(f.clients) < n {
		upto := min(len(f.clients)+batch, n)
		for i := len(f.clients); i < upto; i++ {
			fc := &fleetClient{}
			f.clients = append(f.clients, fc)
			cfg := client.StreamConfig{
				Address: "passthrough:///" + f.c.addr, NodeID: "proxy-" + strconv.Itoa(i), Scope: fanoutScope.Proto(),
				TLS:         client.StreamTLS(tlsconfig.NewRotatingCertificate(f.c.pki.SVID(f.t, fanoutID)), f.c.pki.Bundle, controller),
				DialOptions: f.dial,
			}
			f.wg.Go(func() { f.supervise(cfg, fc) })
		}
		pollFor(f.t, "a batch of proxies to get their first snapshot", 2*time.Minute, func() bool { return f.fulls.Load() == int64(upto) })
	}
	return time.Since(start)
}

// supervise runs one client's stream until the test ends, reconnecting as the proxy does.
func (f *fleet) supervise(cfg client.StreamConfig, fc *fleetClient) {
	const base, ceiling, jitter = 250 * time.Millisecond, 30 * time.Second, 0.2
	attempt := 0
	for {
		var held client.Resources
		f.attempts.Add(1)
		err := client.Run(f.ctx, cfg, func(_ context.Context, snap *discoveryv1.Snapshot) error {
			held = held.Apply(snap)
			attempt = 0
			if g := f.generation.Load(); snap.GetFull() && fc.fullIn.Swap(g) != g {
				f.fulls.Add(1)
			}
			return nil
		})
		if f.ctx.Err() != nil {
			return
		}
		f.mu.Lock()
		code := status.Code(errors.Unwrap(err)).String()
		if f.failures[code] == 0 {
			f.examples = append(f.examples, err.Error())
		}
		f.failures[code]++
		fc.last = err.Error()
		f.mu.Unlock()
		d := min(base<<min(attempt, 10), ceiling)
		d = min(d+time.Duration(float64(d)*jitter*rand.Float64()), ceiling) //nolint:gosec // jitter, not a secret
		attempt++
		select {
		case <-f.ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

// failed returns the stream errors seen so far by gRPC code with an example of each, and
// forgets them.
func (f *fleet) failed() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := fmt.Sprintf("%v (for example %q)", f.failures, f.examples)
	f.failures, f.examples = map[string]int{}, nil
	return out
}

// stuck returns the last errors of up to three clients without a full snapshot in this generation.
func (f *fleet) stuck() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for i, c := range f.clients {
		if c.fullIn.Load() != f.generation.Load() && len(out) < 3 {
			out = append(out, "proxy-"+strconv.Itoa(i)+": "+c.last)
		}
	}
	return out
}

// durations parses an answer of the server process: nanoseconds separated by spaces, sorted.
func durations(t *testing.T, answer string) []time.Duration {
	t.Helper()
	var out []time.Duration
	for _, f := range strings.Fields(answer) {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, time.Duration(n))
	}
	slices.Sort(out)
	return out
}

// fanout is what rounds of one-route deltas to every client of a fleet cost and took.
type fanout struct {
	proxies, rounds int
	// serverCPU and agentCPU are per round.
	serverCPU, agentCPU, wall time.Duration
	// acks are publish-to-ACK latencies over every ACK; sent publish-to-send over every send;
	// last the last ACK of each round.
	acks, sent, last []time.Duration
	// reads and writes are the server's read and write system calls per stream and round.
	reads, writes float64
}

// syscalls returns the read and write system calls of the server process so far.
func (c *benchChild) syscalls() (reads, writes int64) {
	c.t.Helper()
	if _, err := fmt.Sscan(c.ask("syscalls"), &reads, &writes); err != nil {
		c.t.Fatal(err)
	}
	return reads, writes
}

// rounds publishes rounds deltas, each changing one route of the fan-out scope, one after the
// other: a round ends when every client has acknowledged its version.
func (f *fleet) rounds(rounds int, from int) fanout {
	n := len(f.clients)
	r := fanout{proxies: n, rounds: rounds}
	reads0, writes0 := f.c.syscalls()
	server0, agents0, wall0 := f.c.usage(), processCPU(f.t), time.Now()
	for i := range rounds {
		version := f.c.ask("publish " + strconv.Itoa(from+i))
		acks := durations(f.t, f.c.ask("acks "+version+" "+strconv.Itoa(n)))
		r.sent = append(r.sent, durations(f.t, f.c.ask("sent "+version+" "+strconv.Itoa(n)))...)
		r.acks = append(r.acks, acks...)
		r.last = append(r.last, acks[len(acks)-1])
	}
	per := time.Duration(rounds)
	r.serverCPU, r.agentCPU, r.wall = (f.c.usage()-server0)/per, (processCPU(f.t)-agents0)/per, time.Since(wall0)/per
	reads, writes := f.c.syscalls()
	r.reads, r.writes = float64(reads-reads0)/float64(rounds*n), float64(writes-writes0)/float64(rounds*n)
	slices.Sort(r.acks)
	slices.Sort(r.sent)
	slices.Sort(r.last)
	return r
}

func (r fanout) String() string {
	us := func(d time.Duration) string { return d.Round(10 * time.Microsecond).String() }
	return strconv.Itoa(r.proxies) + " proxies, " + strconv.Itoa(r.rounds) + " rounds: server CPU per round " + us(r.serverCPU) +
		" (" + (r.serverCPU / time.Duration(r.proxies)).Round(100*time.Nanosecond).String() + " per proxy), agents' CPU per round " + us(r.agentCPU) +
		", wall per round " + us(r.wall) + fmt.Sprintf("; server system calls per proxy and round: %.2f reads, %.2f writes", r.reads, r.writes) +
		"; publish-to-send (server side) p50 " + us(percentile(r.sent, 50)) + ", p99 " + us(percentile(r.sent, 99)) + ", max " + us(r.sent[len(r.sent)-1]) +
		"; publish-to-ACK p50 " + us(percentile(r.acks, 50)) + ", p99 " + us(percentile(r.acks, 99)) + ", max " + us(r.acks[len(r.acks)-1]) +
		"; last ACK of a round: median " + us(percentile(r.last, 50)) + ", worst " + us(r.last[len(r.last)-1])
}

// Measures the stream server's CPU per stream for a one-route delta, and the fan-out's latency
// with the agents' CPU counted apart from the server's.
//
// Method. The stream server runs in a process of its own (this test binary re-executed, see
// TestBenchServerProcess), so that its getrusage CPU time is the controller's cost alone: the
// discovery clients (client.Run, the proxy's stream loop, each on its own mTLS connection with
// its own SVID) run in this process, whose CPU time is reported as the agents'. Each round
// changes one route of a Gateway scope of 100 routes and waits for every client's ACK.
//
// The server's CPU per round includes what does not depend on the number of streams (building
// the round's resources in the server process, cache.Set, hashing, encoding the delta once). So
// the rounds run twice, with COXSWAIN_BENCH_FEW (100) and then COXSWAIN_BENCH_PROXIES (1000)
// clients, and the CPU per stream is the slope between the two: (CPU(many) - CPU(few)) /
// (many - few), per round; the intercept is the fixed cost of a round. Latency is reported from
// just before cache.Set to the server's stamp of each ACK (publish-to-ACK, what a proxy sees,
// agents' CPU included since they share the cores) and to the return of each send in the server
// (publish-to-send: the server's own fan-out, which waits on the agents only through the CPU
// they take). With COXSWAIN_BENCH_PIN=1 the server process runs on CPU 0 and this process on
// CPU 1, so that neither takes the other's core.
func TestBenchFanoutPerStream(t *testing.T) {
	skipUnlessBench(t)
	few := benchInt(t, "COXSWAIN_BENCH_FEW", 100)
	many := benchInt(t, "COXSWAIN_BENCH_PROXIES", 1000)
	rounds := benchInt(t, "COXSWAIN_BENCH_ROUNDS", 20)
	if few >= many {
		t.Fatalf("COXSWAIN_BENCH_FEW (%d) must be below COXSWAIN_BENCH_PROXIES (%d)", few, many)
	}
	var env []string
	if os.Getenv("COXSWAIN_BENCH_PIN") != "" {
		env = append(env, benchPinEnv+"=0")
		pinProcess(t, "1")
		t.Log("server process pinned to CPU 0, the agents to CPU 1")
	}
	c := startBenchChild(t, 1, env...)
	f := newFleet(t, c)
	f.grow(few, 50)
	f.rounds(2, 1) // warm-up
	small := f.rounds(rounds, 1000)
	t.Logf("%s", small)
	f.grow(many, 50)
	f.rounds(2, 2000)
	large := f.rounds(rounds, 3000)
	t.Logf("%s", large)
	perStream := (large.serverCPU - small.serverCPU) / time.Duration(many-few)
	fixed := small.serverCPU - perStream*time.Duration(few)
	t.Logf("server CPU per stream per one-route delta (slope from %d to %d streams): %s (target <= 20us: %s); fixed cost of a round %s; agents' CPU per stream %s",
		few, many, perStream.Round(100*time.Nanosecond), verdict(perStream <= 20*time.Microsecond), fixed.Round(10*time.Microsecond),
		((large.agentCPU - small.agentCPU) / time.Duration(many-few)).Round(100*time.Nanosecond))
	t.Logf("%d proxies: publish-to-ACK p99 %s with agents' CPU per round %s counted apart from the server's %s; the server's own publish-to-send p99 %s",
		many, percentile(large.acks, 99).Round(10*time.Microsecond), large.agentCPU.Round(10*time.Microsecond),
		large.serverCPU.Round(10*time.Microsecond), percentile(large.sent, 99).Round(10*time.Microsecond))
}

// Measures 10,000 proxies (COXSWAIN_BENCH_FLEET) on one stream server: its memory per idle
// stream, one delta's fan-out, and a reconnect storm after a restart.
//
// Method. The stream server runs in a process of its own (TestBenchServerProcess), served as the
// operator serves it (behind Listener, connection caps lifted to 20,000), so that its heap,
// stacks, resident set and CPU time are the server's alone; the clients run in this process,
// each a client.Run stream loop on its own mTLS connection with its own SVID, reconnecting
// with the proxy's backoff (see fleet), all subscribed to one Gateway scope of 100 routes of
// about 500 bytes (one ServiceAccount; the per-identity cap is lifted). Memory: heap in use and
// goroutine stacks after two collections, and VmRSS, before any stream and with all of them
// idle after their first snapshot; per stream is the difference divided by the streams.
// Fan-out: COXSWAIN_BENCH_ROUNDS (5) rounds of a one-route delta, as TestBenchFanoutPerStream.
// Storm: the server process stops its gRPC server (closing the listener and every connection)
// and serves a new Server on the same address and cache; the clock runs from the restart
// command until every client holds a full snapshot from the new server, with a deadline of
// COXSWAIN_BENCH_STORM_DEADLINE seconds (180); clients without one then are stuck. The
// bootstrap (CSR signing, TokenReview) is not part of it: the clients keep their SVIDs, as
// proxies do across a controller restart (see internal/discoveryserver's
// TestMeasureBootstrapStorm for that).
func TestBenchTenThousandProxies(t *testing.T) {
	skipUnlessBench(t)
	n := benchInt(t, "COXSWAIN_BENCH_FLEET", 10000)
	rounds := benchInt(t, "COXSWAIN_BENCH_ROUNDS", 5)
	deadline := time.Duration(benchInt(t, "COXSWAIN_BENCH_STORM_DEADLINE", 180)) * time.Second
	c := startBenchChild(t, 1)
	base := c.memory()
	t.Logf("server process before any stream: heap %s, stacks %s, resident %s", mib(base.heap), mib(base.stack), mib(base.rss))
	f := newFleet(t, c)
	server0 := c.usage()
	took := f.grow(n, 250)
	t.Logf("%d proxies connected and received their first snapshot in %s (server CPU %s); stream errors %s",
		n, took.Round(time.Millisecond), (c.usage() - server0).Round(time.Millisecond), f.failed())
	idle := func(when string) {
		m := c.memory()
		per := func(now, before uint64) float64 { return float64(int64(now)-int64(before)) / float64(m.live) / 1024 }
		t.Logf("%s, %d idle streams: heap %s, stacks %s, resident %s; per stream: heap %.1f KiB, stacks %.1f KiB, heap+stacks %.1f KiB (target <= 50 KiB: %s), resident %.1f KiB (%s)",
			when, m.live, mib(m.heap), mib(m.stack), mib(m.rss), per(m.heap, base.heap), per(m.stack, base.stack),
			per(m.heap+m.stack, base.heap+base.stack), verdict(per(m.heap+m.stack, base.heap+base.stack) <= 50),
			per(m.rss, base.rss), verdict(per(m.rss, base.rss) <= 50))
	}
	idle("connected")
	if prof := os.Getenv("COXSWAIN_BENCH_SERVER_HEAPPROFILE"); prof != "" {
		c.ask("heapprofile " + prof)
	}
	f.rounds(1, 1) // warm-up
	t.Logf("one-route delta: %s", f.rounds(rounds, 100))

	f.generation.Add(1)
	f.fulls.Store(0)
	server0, agents0 := c.usage(), processCPU(t)
	start := time.Now()
	stopped := durations(t, c.ask("restart"))[0]
	var all time.Duration
	for time.Since(start) < deadline && f.fulls.Load() < int64(n) {
		time.Sleep(10 * time.Millisecond) // polling a counter with a deadline that is itself measured
	}
	all = time.Since(start)
	stuck := int64(n) - f.fulls.Load()
	live := c.ask("live")
	t.Logf("reconnect storm of %d proxies after a server restart (stop took %s): all subscribed with a full snapshot again in %s (target <= 60s: %s); %d stuck after %s; server live streams %s; server CPU %s, agents' CPU %s; stream errors seen by the clients %s, %d streams opened in all",
		n, stopped.Round(time.Millisecond), all.Round(time.Millisecond), verdict(stuck == 0 && all <= time.Minute), stuck, deadline,
		live, (c.usage() - server0).Round(time.Millisecond), (processCPU(t) - agents0).Round(time.Millisecond), f.failed(), f.attempts.Load())
	if stuck > 0 {
		t.Errorf("%d proxies stuck without a full snapshot %s after the restart, for example %q", stuck, deadline, f.stuck())
	}
	idle("after the storm")
}
