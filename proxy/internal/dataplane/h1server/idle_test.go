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
	"runtime/pprof"
	"strconv"
	"sync"
	"testing"
	"time"

	"coxswain.dev/coxswain/proxy/internal/dataplane/h1server"
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
	kib, stats := measureIdle(t, cmd, "a", n, 64)
	t.Logf("%s: %s", engine, stats)
	return kib
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
		opts := h1server.Options{ParkAfter: h1server.DefaultParkAfter}
		if engine == "native-unparked" {
			opts.ParkAfter = 0
		}
		s := h1server.New(h, opts)
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
