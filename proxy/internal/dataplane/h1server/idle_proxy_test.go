package h1server_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/listener"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// The whole-proxy idle memory measurement runs only when asked: proxyIdleConnsEnv is how
// many connections, proxyIdleServeEnv tells the child process the engine and backend.
const (
	proxyIdleConnsEnv = "H1SERVER_PROXY_IDLE_CONNS"
	proxyIdleServeEnv = "H1SERVER_PROXY_IDLE_SERVE"
)

// Tests (measures) the memory an idle keep-alive client connection holds in the whole data
// plane (listener caps, handler, upstream pool) with each HTTP/1.1 engine: a child process runs
// the data plane routing to a backend of this process, the test makes one request on each of
// the connections and reads the child's resident set 10 s after the last one opened.
func TestProxyIdleMemory(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(proxyIdleConnsEnv))
	if n == 0 {
		t.Skip(proxyIdleConnsEnv + " unset: the idle memory measurement runs only when asked")
	}
	backend := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})}
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = backend.Serve(ln) }()
	t.Cleanup(func() { _ = backend.Close() })
	for _, e := range http1.Engines {
		kib, stats := proxyIdleKiB(t, string(e), ln.Addr().String(), n)
		t.Logf("%s: %.2f KiB per idle connection over %d connections (%s)", e, kib, n, stats)
	}
}

func proxyIdleKiB(t *testing.T, engine, backend string, n int) (float64, string) {
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestProxyIdleMemoryServer$")
	cmd.Env = append(os.Environ(), proxyIdleServeEnv+"="+engine+","+backend)
	cmd.Stderr = os.Stderr
	return measureIdle(t, cmd, "x", n, 32)
}

// measureIdle starts cmd, a child serving on the address it prints first, opens n
// connections to it (par at a time) each making one request for host, and returns the growth
// of the child's resident set per connection 10 s after the last one opened, with the line
// the child prints about its heap when asked.
func measureIdle(t *testing.T, cmd *exec.Cmd, host string, n, par int) (float64, string) {
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	}()
	out := bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimSpace(line)
	base := rss(t, cmd.Process.Pid)
	conns := make([]net.Conn, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, par)
	for i := range conns {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			conns[i] = c
			_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		})
	}
	wg.Wait()
	time.Sleep(10 * time.Second) // the measurement's own delay, not a synchronisation
	grown := rss(t, cmd.Process.Pid) - base
	_, _ = io.WriteString(stdin, "stats\n")
	stats, _ := out.ReadString('\n')
	for _, c := range conns {
		if c != nil {
			_ = c.Close()
		}
	}
	return float64(grown) / float64(n), strings.TrimSpace(stats)
}

func rss(t *testing.T, pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kib, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return kib
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestProxyIdleMemoryServer is the child of TestProxyIdleMemory: a data plane of the engine
// proxyIdleServeEnv names, routing every request to its backend, until standard input closes.
func TestProxyIdleMemoryServer(t *testing.T) {
	engine, backend, ok := strings.Cut(os.Getenv(proxyIdleServeEnv), ",")
	if !ok {
		t.Skip("the child process of TestProxyIdleMemory")
	}
	d, err := dataplane.New(logr.Discard(), dataplane.Options{
		HTTP1Engine: http1.Engine(engine),
		// One client address holds every connection: the caps are raised above them.
		Listener: listener.Options{
			Address:        func(uint32) string { return "127.0.0.1:0" },
			MaxConnections: 1 << 20, MaxConnectionsPerClient: 1 << 20,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	set := snaptest.Set(t, "idle", snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "", snaptest.Route("ns/r/0/0", "", snaptest.Prefix("/"), "ns/app:80"))),
		snaptest.Cluster(t, "ns/app:80", backend))
	if err := d.Apply(context.Background(), set); err != nil {
		t.Fatal(err)
	}
	addr, _ := d.Addr(80)
	fmt.Println(addr)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Printf("heap in use %d KiB, stacks in use %d KiB, goroutines %d\n", ms.HeapInuse>>10, ms.StackInuse>>10, runtime.NumGoroutine())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = d.Shutdown(ctx)
}
