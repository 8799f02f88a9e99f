package h1server

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
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The idle memory measurement runs only when asked, as it opens thousands of connections:
// idleConnsEnv is how many, idleServeEnv tells the child process which server to run.
const (
	idleConnsEnv = "H1SERVER_IDLE_CONNS"
	idleServeEnv = "H1SERVER_IDLE_SERVE"
)

// Tests (measures) the memory an idle keep-alive connection holds in each server: a child
// process serves on loopback, the test opens the connections, makes one request on each and
// reads the child's resident set 10 s after the last one opened; the figure is the growth
// over the child's resident set before, per connection.
func TestIdleMemory(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(idleConnsEnv))
	if n == 0 {
		t.Skip(idleConnsEnv + " unset: the idle memory measurement runs only when asked")
	}
	for _, engine := range []string{"native", "native-unparked", "nethttp"} {
		kib := idleKiB(t, engine, n)
		t.Logf("%s: %.2f KiB per idle connection over %d connections", engine, kib, n)
	}
}

func idleKiB(t *testing.T, engine string, n int) float64 {
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestIdleMemoryServer$")
	cmd.Env = append(os.Environ(), idleServeEnv+"="+engine)
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
	base := rssKiB(t, cmd.Process.Pid)
	conns := make([]net.Conn, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
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
			_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
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
	grown := rssKiB(t, cmd.Process.Pid) - base
	_, _ = io.WriteString(stdin, "stats\n")
	if stats, err := out.ReadString('\n'); err == nil {
		t.Logf("%s: %s", engine, strings.TrimSpace(stats))
	}
	for _, c := range conns {
		if c != nil {
			_ = c.Close()
		}
	}
	return float64(grown) / float64(n)
}

func rssKiB(t *testing.T, pid int) int {
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

// TestIdleMemoryServer is the child of TestIdleMemory: it serves with the server idleServeEnv
// names until its standard input closes.
func TestIdleMemoryServer(t *testing.T) {
	engine := os.Getenv(idleServeEnv)
	if engine == "" {
		t.Skip("the child process of TestIdleMemory")
	}
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	var wg sync.WaitGroup
	var stop func()
	if engine == "native" || engine == "native-unparked" {
		opts := Options{ParkAfter: DefaultParkAfter}
		if engine == "native-unparked" {
			opts.ParkAfter = 0
		}
		s := New(h, opts)
		wg.Go(func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				wg.Go(func() { _ = s.ServeConn(c) })
			}
		})
		stop = func() { _ = ln.Close(); s.Close() }
	} else {
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		wg.Go(func() { _ = srv.Serve(ln) })
		stop = func() { _ = srv.Close() }
	}
	fmt.Println(ln.Addr().String())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		if path := os.Getenv("H1SERVER_IDLE_HEAP"); path != "" {
			if f, err := os.Create(path + "." + engine); err == nil {
				_ = pprof.WriteHeapProfile(f)
				_ = f.Close()
			}
		}
		fmt.Printf("heap in use %d KiB, stacks in use %d KiB, goroutines %d\n", ms.HeapInuse>>10, ms.StackInuse>>10, runtime.NumGoroutine())
	}
	stop()
	wg.Wait()
}
