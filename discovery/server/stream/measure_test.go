package stream

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/discovery/server/servertest"
)

// heapInUse returns the bytes of the heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// The measurement runs the stream listener in a child process (this test binary, running
// TestMeasureServerProcess), so that its heap holds the server's side only. They talk through
// files in a shared directory: the child writes its CA and address, and answers every request
// file "measure-N" with "heap-N".
const measureDirEnv = "COXSWAIN_MEASURE_SERVER_DIR"

// TestMeasureServerProcess is the child of TestMeasureStreamsOfOneIdentity.
func TestMeasureServerProcess(t *testing.T) {
	dir := os.Getenv(measureDirEnv)
	if dir == "" {
		t.Skip("the server side of TestMeasureStreamsOfOneIdentity")
	}
	limit, _ := strconv.Atoi(os.Getenv("COXSWAIN_MEASURE_CAP"))
	e := newEnv(t, func(c *Config) { c.MaxStreamsPerIdentity = limit })
	e.set(t, webScope, map[string]string{"listener": strings.Repeat("k", 2<<20)})
	certPEM, keyPEM, err := e.pki.CA.EncodePEM()
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name+".tmp"), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, name+".tmp"), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	write("ca.crt", string(certPEM))
	write("ca.key", string(keyPEM))
	write("addr", e.addr)
	for n := 0; ; n++ {
		req := filepath.Join(dir, "measure-"+strconv.Itoa(n))
		for {
			if _, err := os.Stat(filepath.Join(dir, "stop")); err == nil {
				return
			}
			if _, err := os.Stat(req); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond) // polling a file of the parent process
		}
		write("heap-"+strconv.Itoa(n), strconv.FormatUint(heapInUse(), 10)+" "+strconv.Itoa(len(e.srv.live())))
	}
}

// Measures the stream listener's heap, in a process of its own, while one identity opens 1,000
// streams that read and ACK a 2 MiB snapshot and 100 that never read. Set COXSWAIN_MEASURE=1 to
// run it, and COXSWAIN_MEASURE_CAP to change the per-identity cap (2000 lifts it, as before it
// existed), COXSWAIN_MEASURE_IDLE the number of idle streams.
func TestMeasureStreamsOfOneIdentity(t *testing.T) {
	if os.Getenv("COXSWAIN_MEASURE") == "" {
		t.Skip("set COXSWAIN_MEASURE=1 to measure")
	}
	limit := os.Getenv("COXSWAIN_MEASURE_CAP")
	if limit == "" {
		limit = strconv.Itoa(DefaultMaxStreamsPerIdentity)
	}
	idle, sleepers := 1000, 100
	if v := os.Getenv("COXSWAIN_MEASURE_IDLE"); v != "" {
		idle, _ = strconv.Atoi(v)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	child := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestMeasureServerProcess$") //nolint:gosec // this test binary
	child.Env = append(os.Environ(), measureDirEnv+"="+dir, "COXSWAIN_MEASURE_CAP="+limit)
	child.Stdout, child.Stderr = os.Stderr, os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = os.WriteFile(filepath.Join(dir, "stop"), nil, 0o600)
		_ = child.Wait()
	}()
	read := func(name string) string {
		var data []byte
		waitFor(t, name+" from the server process", func() bool {
			var err error
			data, err = os.ReadFile(filepath.Join(dir, name))
			return err == nil
		})
		return string(data)
	}
	measures := 0
	heap := func() string {
		n := strconv.Itoa(measures)
		measures++
		if err := os.WriteFile(filepath.Join(dir, "measure-"+n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(read("heap-" + n))
		b, _ := strconv.ParseFloat(f[0], 64)
		return strconv.FormatFloat(b/(1<<20), 'f', 1, 64) + " MiB with " + f[1] + " live streams"
	}
	addr := read("addr")
	ca, err := pki.ParseCA([]byte(read("ca.crt")), []byte(read("ca.key")))
	if err != nil {
		t.Fatal(err)
	}
	p := servertest.NewPKIFrom(t, ca)
	e := &env{pki: p, addr: addr}
	cert := p.SVID(t, webID)
	t.Logf("server heap before: %s", heap())

	var mu sync.Mutex
	seen := map[codes.Code]int{}
	record := func(err error) {
		mu.Lock()
		seen[status.Code(err)]++
		mu.Unlock()
	}
	var clients []discoveryv1.DiscoveryClient
	for range (idle+sleepers)/maxConcurrentStreams + 1 {
		clients = append(clients, e.client(t, cert))
	}
	var wg sync.WaitGroup
	for i := range idle {
		wg.Go(func() {
			s := open(t, clients[i/maxConcurrentStreams], subscribeMessage("idle-"+strconv.Itoa(i), webScope))
			snap, err := s.recv()
			record(err)
			if err == nil {
				s.ack(snap)
			}
		})
	}
	wg.Wait()
	t.Logf("server heap with the idle streams: %s; idle stream results %v", heap(), seen)
	var refused sync.WaitGroup
	for i := range sleepers {
		refused.Go(func() {
			j := idle + i
			s := open(t, clients[j/maxConcurrentStreams], subscribeMessage("sleeper-"+strconv.Itoa(i), webScope))
			if s.err != nil && !errors.Is(s.err, context.Canceled) {
				t.Logf("sleeper %d: %v", i, s.err)
			}
		})
	}
	refused.Wait()
	time.Sleep(2 * time.Second) // lets the never-reading streams subscribe: a measurement, not synchronisation
	t.Logf("cap %s: server heap with %d idle and %d never-reading streams of one identity: %s", limit, idle, sleepers, heap())
}
