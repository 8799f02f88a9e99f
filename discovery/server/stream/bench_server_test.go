//go:build linux

package stream

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/servertest"
)

// The benchmarks run the servers in a child process (this test binary, running
// TestBenchServerProcess), so that its CPU time and heap are the servers' only;
// COXSWAIN_BENCH_SERVER_CPUPROFILE names a file for its CPU profile. The parent
// writes the CA into the directory named by benchDirEnv and sends commands, one a line, on the
// child's file 3; the child answers each with one line on its file 4.
const benchDirEnv = "COXSWAIN_BENCH_SERVER_DIR"

// Shape of the child's cache: the shared pool holds a snapshot of fullSnapshotBytes in
// fullSnapshotResources resources; each of benchGateways Gateways "prod/gw-N", served to
// ServiceAccount "gw-N-coxswain", holds 10 routes of about 500 bytes.
const (
	fullSnapshotBytes     = 1 << 20
	fullSnapshotResources = 256
	benchGatewaysEnv      = "COXSWAIN_BENCH_GATEWAYS"
)

// The fan-out benchmark's scope: a Gateway of fanoutRoutes routes whose proxies run as one
// ServiceAccount (the child's per-identity cap is 4096).
var fanoutScope = cache.Gateway("prod", "fanout")

const (
	fanoutServiceAccount = "fanout-coxswain"
	fanoutID             = "spiffe://cluster.local/ns/prod/sa/" + fanoutServiceAccount
	fanoutRoutes         = 100
)

func gatewayID(i int) string {
	return "spiffe://cluster.local/ns/prod/sa/gw-" + strconv.Itoa(i) + "-coxswain"
}

func gatewayScope(i int) cache.Scope { return cache.Gateway("prod", "gw-"+strconv.Itoa(i)) }

// rawCodec sends and receives *[]byte as they are and marshals other messages with proto: the
// codec of the raw gRPC server the stream server is compared with.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if b, ok := v.(*[]byte); ok {
		return mem.BufferSlice{mem.SliceBuffer(*b)}, nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("raw codec: cannot marshal %T", v)
	}
	b, err := proto.Marshal(m)
	return mem.BufferSlice{mem.SliceBuffer(b)}, err
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("raw codec: cannot unmarshal into %T", v)
	}
	*b = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "raw" }

// rawService is a bare gRPC service sending one message per stream: Bytes sends pre-encoded
// bytes, Proto marshals the same ServerMessage for every stream.
var rawService = grpc.ServiceDesc{
	ServiceName: "coxswain.bench.Raw",
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{
		{StreamName: "Bytes", ServerStreams: true, ClientStreams: true},
		{StreamName: "Proto", ServerStreams: true, ClientStreams: true},
	},
}

// rawServer answers a stream as the stream server does, without anything else: it waits for a
// first message, sends the snapshot, waits for the answer and for the client to leave.
type rawServer struct {
	live  atomic.Int64
	bytes []byte
	msg   *discoveryv1.ServerMessage
}

func (r *rawServer) handler(send func(*rawServer) any) grpc.StreamHandler {
	return func(_ any, ss grpc.ServerStream) error {
		r.live.Add(1)
		defer r.live.Add(-1)
		var in []byte
		if err := ss.RecvMsg(&in); err != nil {
			return err
		}
		if err := ss.SendMsg(send(r)); err != nil {
			return err
		}
		for {
			if err := ss.RecvMsg(&in); err != nil {
				return nil //nolint:nilerr // the client leaving ends the stream
			}
		}
	}
}

func (r *rawServer) desc() *grpc.ServiceDesc {
	d := rawService
	d.Streams = []grpc.StreamDesc{d.Streams[0], d.Streams[1]}
	d.Streams[0].Handler = r.handler(func(r *rawServer) any { return &r.bytes })
	d.Streams[1].Handler = r.handler(func(r *rawServer) any { return r.msg })
	return &d
}

// TestBenchServerProcess is the child of the benchmarks below.
func TestBenchServerProcess(t *testing.T) {
	dir := os.Getenv(benchDirEnv)
	if dir == "" {
		t.Skip("the server side of the control-plane benchmarks")
	}
	gateways := benchInt(t, benchGatewaysEnv, 400)
	certPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.ParseCA(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	p := servertest.NewPKIFrom(t, ca)
	snapshots := cache.New(nil)
	scopes := &scopeTable{sas: map[string]string{}}
	var big []*discoveryv1.Resource
	for i := range fullSnapshotResources {
		r, err := cache.NewResource(fmt.Sprintf("listener/%04d", i), wrapperspb.String(strings.Repeat("x", fullSnapshotBytes/fullSnapshotResources-40)))
		if err != nil {
			t.Fatal(err)
		}
		big = append(big, r)
	}
	if _, err := snapshots.Set(cache.SharedPool(), big); err != nil {
		t.Fatal(err)
	}
	for i := range gateways {
		scopes.sas["prod/gw-"+strconv.Itoa(i)] = "gw-" + strconv.Itoa(i) + "-coxswain"
		if _, err := snapshots.Set(gatewayScope(i), routes(t, 10, i%10, i)); err != nil {
			t.Fatal(err)
		}
	}
	if cpu := os.Getenv(benchPinEnv); cpu != "" {
		pinProcess(t, cpu)
	}
	scopes.sas[fanoutScope.Namespace+"/"+fanoutScope.Name] = fanoutServiceAccount
	if _, err := snapshots.Set(fanoutScope, routes(t, fanoutRoutes, -1, 0)); err != nil {
		t.Fatal(err)
	}
	clock := &ackClock{at: map[string][]time.Time{}}
	published := map[string]time.Time{}
	serving := serveBench(t, Config{
		TrustDomain: p.TD, Bundles: p.Bundle, Cache: snapshots, Scopes: scopes,
		MaxStreamsPerIdentity: 20000, MaxStreams: 20000, MaxConnections: 20000, MaxConnectionsPerSource: 20000,
		Logger: logr.Discard(),
	}, p, clock, "127.0.0.1:0")
	t.Cleanup(func() { serving.stop(t) })
	addr := serving.addr

	body, _, err := snapshots.Get(cache.SharedPool()).Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	raw := &rawServer{bytes: materialize(newFrame(body, "1"))}
	raw.msg = &discoveryv1.ServerMessage{}
	if err := proto.Unmarshal(raw.bytes, raw.msg); err != nil {
		t.Fatal(err)
	}
	tlsConfig, err := mutualTLS(p.StreamServerTLS())
	if err != nil {
		t.Fatal(err)
	}
	rs := grpc.NewServer(grpc.Creds(credentials.NewTLS(tlsConfig)), grpc.ForceServerCodecV2(rawCodec{}),
		grpc.MaxSendMsgSize(discoveryv1.MaxServerMessageBytes))
	rs.RegisterService(raw.desc(), nil)
	rawAddr := servertest.Serve(t, rs)

	commands := bufio.NewScanner(os.NewFile(3, "commands"))
	replies := os.NewFile(4, "replies")
	reply := func(s string) {
		if _, err := io.WriteString(replies, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	for commands.Scan() {
		cmd, arg, _ := strings.Cut(commands.Text(), " ")
		switch cmd {
		case "version":
			reply(snapshots.Get(fanoutScope).Version())
		case "publish":
			// A new version of the fan-out scope whose one changed route is numbered arg.
			rev, _ := strconv.Atoi(arg)
			resources := routes(t, fanoutRoutes, rev%fanoutRoutes, rev)
			at := time.Now()
			if _, err := snapshots.Set(fanoutScope, resources); err != nil {
				t.Fatal(err)
			}
			v := snapshots.Get(fanoutScope).Version()
			published[v] = at
			reply(v)
		case "acks":
			// The publish-to-ACK latencies of version v, in nanoseconds, once n streams ACKed it.
			v, n, _ := strings.Cut(arg, " ")
			want, _ := strconv.Atoi(n)
			pollFor(t, "the ACKs of "+v, time.Minute, func() bool { return clock.count(v) >= want })
			var out []string
			for _, at := range clock.times(v) {
				out = append(out, strconv.FormatInt(int64(at.Sub(published[v])), 10))
			}
			reply(strings.Join(out, " "))
		case "usage":
			reply(strconv.FormatInt(int64(processCPU(t)), 10))
		case "addr":
			reply(addr + " " + rawAddr)
		case "cpu":
			// Teardown of the last round's streams is part of its cost.
			pollFor(t, "the streams to close", time.Minute, func() bool { return len(serving.srv.live()) == 0 && raw.live.Load() == 0 })
			reply(strconv.FormatInt(int64(processCPU(t)), 10))
		case "heap":
			runtime.GC()
			runtime.GC()
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			reply(fmt.Sprintf("%d %d %d %d", m.HeapInuse, m.StackInuse, residentBytes(t), len(serving.srv.live())))
		case "sent":
			// The publish-to-send latencies of version v, in nanoseconds, once n sends returned.
			v, n, _ := strings.Cut(arg, " ")
			want, _ := strconv.Atoi(n)
			var sent []time.Time
			pollFor(t, "the sends of "+v, time.Minute, func() bool { sent = clock.sentSince(published[v]); return len(sent) >= want })
			var out []string
			for _, at := range sent {
				out = append(out, strconv.FormatInt(int64(at.Sub(published[v])), 10))
			}
			reply(strings.Join(out, " "))
		case "heapprofile":
			// Writes a heap profile, after a collection, to the file arg.
			runtime.GC()
			f, err := os.Create(arg)
			if err != nil {
				t.Fatal(err)
			}
			if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			reply("ok")
		case "syscalls":
			// The read and write system calls of this process so far (syscr and syscw).
			reply(syscallCounts(t))
		case "live":
			reply(strconv.Itoa(len(serving.srv.live())))
		case "restart":
			// Stops the stream server, which closes every connection, and serves a new one
			// on the same address and cache; answers how long the stop took, in nanoseconds.
			at := time.Now()
			serving.stop(t)
			stopped := time.Since(at)
			serving = serveBench(t, serving.cfg, p, clock, addr)
			reply(strconv.FormatInt(int64(stopped), 10))
		case "stop":
			return
		}
	}
}

// syscallCounts returns the read and write system calls this process made, "syscr syscw".
func syscallCounts(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Fatal(err)
	}
	var r, w string
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "syscr: "); ok {
			r = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "syscw: "); ok {
			w = strings.TrimSpace(v)
		}
	}
	return r + " " + w
}

// residentBytes returns the resident set size of this process.
func residentBytes(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

func materialize(f *frame) []byte {
	b, err := newCodec().Marshal(f)
	if err != nil {
		panic(err)
	}
	return b.Materialize()
}

// benchChild is the parent's end of TestBenchServerProcess.
type benchChild struct {
	t       *testing.T
	pki     *servertest.PKI
	addr    string
	rawAddr string
	send    io.Writer
	recv    *bufio.Scanner
}

// startBenchChild starts the server process with gateways Gateways and env added to its
// environment.
func startBenchChild(t *testing.T, gateways int, env ...string) *benchChild {
	t.Helper()
	p := servertest.NewPKI(t)
	dir := t.TempDir()
	certPEM, keyPEM, err := p.CA.EncodePEM()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.key"), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	args := []string{"-test.run=^TestBenchServerProcess$"}
	if prof := os.Getenv("COXSWAIN_BENCH_SERVER_CPUPROFILE"); prof != "" {
		args = append(args, "-test.cpuprofile="+prof)
	}
	child := exec.CommandContext(ctx, os.Args[0], args...) //nolint:gosec // this test binary
	child.Env = append(append(os.Environ(), benchDirEnv+"="+dir, benchGatewaysEnv+"="+strconv.Itoa(gateways)), env...)
	child.Stdout, child.Stderr = os.Stderr, os.Stderr
	child.ExtraFiles = []*os.File{cmdR, repW}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	_ = cmdR.Close()
	_ = repW.Close()
	c := &benchChild{t: t, pki: p, send: cmdW, recv: bufio.NewScanner(repR)}
	// An answer lists up to one latency per stream: 10,000 of them take more than the default.
	c.recv.Buffer(nil, 16<<20)
	t.Cleanup(func() {
		_, _ = io.WriteString(cmdW, "stop\n")
		_ = cmdW.Close()
		done := make(chan error, 1)
		go func() { done <- child.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("server process: %v", err)
			}
		case <-time.After(time.Minute):
			cancel()
			t.Errorf("server process did not stop; killed: %v", <-done)
		}
		cancel()
		_ = repR.Close()
	})
	f := strings.Fields(c.ask("addr"))
	c.addr, c.rawAddr = f[0], f[1]
	return c
}

// ask sends a command and returns the answer.
func (c *benchChild) ask(cmd string) string {
	c.t.Helper()
	if _, err := io.WriteString(c.send, cmd+"\n"); err != nil {
		c.t.Fatal(err)
	}
	if !c.recv.Scan() {
		c.t.Fatalf("no answer to %q from the server process: %v", cmd, c.recv.Err())
	}
	return c.recv.Text()
}

// cpu returns the CPU time the server process used so far, once the streams it served closed.
func (c *benchChild) cpu() time.Duration {
	c.t.Helper()
	n, err := strconv.ParseInt(c.ask("cpu"), 10, 64)
	if err != nil {
		c.t.Fatal(err)
	}
	return time.Duration(n)
}

// usage returns the CPU time the server process used so far.
func (c *benchChild) usage() time.Duration {
	c.t.Helper()
	n, err := strconv.ParseInt(c.ask("usage"), 10, 64)
	if err != nil {
		c.t.Fatal(err)
	}
	return time.Duration(n)
}

// memory is the server process's memory after a collection.
type memory struct {
	heap, stack, rss uint64
	live             int
}

func (c *benchChild) memory() memory {
	c.t.Helper()
	var m memory
	if _, err := fmt.Sscan(c.ask("heap"), &m.heap, &m.stack, &m.rss, &m.live); err != nil {
		c.t.Fatal(err)
	}
	return m
}
