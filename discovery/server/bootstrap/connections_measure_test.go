package bootstrap

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// envMeasureChild makes TestMeasureServeIdleConnections serve for its parent.
const envMeasureChild = "COXSWAIN_MEASURE_CHILD"

// Measures what an idle bootstrap connection costs the server: TLS done, the HTTP/2 preface and
// SETTINGS sent, nothing more; then a silent one, TCP only, waiting for its handshake. The server runs in a child process, so the client's own
// connections are not counted. Set COXSWAIN_MEASURE=1 (and COXSWAIN_MEASURE_CONNS, 1000 by
// default) to run it.
func TestMeasureIdleBootstrapConnectionCost(t *testing.T) {
	if os.Getenv("COXSWAIN_MEASURE") == "" {
		t.Skip("set COXSWAIN_MEASURE=1 to measure")
	}
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("COXSWAIN_MEASURE_CONNS")); err == nil {
		n = v
	}
	child := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestMeasureServeIdleConnections$", "-test.v")
	child.Env = append(os.Environ(), envMeasureChild+"=1")
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	next := func(prefix string) []string {
		for lines.Scan() {
			if f := strings.Fields(lines.Text()); len(f) > 0 && f[0] == prefix {
				return f[1:]
			}
		}
		t.Fatalf("child ended before %s", prefix)
		return nil
	}
	addr := next("ADDR")[0]
	stats := func() (heap, stack, goroutines float64) {
		_, _ = io.WriteString(stdin, "stats\n")
		f := next("STATS")
		h, _ := strconv.ParseFloat(f[0], 64)
		s, _ := strconv.ParseFloat(f[1], 64)
		g, _ := strconv.ParseFloat(f[2], 64)
		return h, s, g
	}
	for _, kind := range []string{"idle HTTP/2", "silent TCP"} {
		heap0, stack0, g0 := stats()
		conns := make([]net.Conn, 0, n)
		for i := range n {
			source := fmt.Sprintf("127.0.%d.%d", 1+i/250, 1+i%250)
			if kind == "silent TCP" {
				conns = append(conns, silentTCP(t, addr, source))
			} else {
				conns = append(conns, idleHTTP2(t, addr, source))
			}
		}
		time.Sleep(2 * time.Second) // lets the server finish its side of every connection: a measurement
		heap1, stack1, g1 := stats()
		t.Logf("%d %s connections: heap in use %+.1f MiB (%.1f KiB each), stacks %+.1f MiB (%.1f KiB each), goroutines %+.0f (%.1f each)",
			n, kind, (heap1-heap0)/(1<<20), (heap1-heap0)/float64(n)/1024, (stack1-stack0)/(1<<20), (stack1-stack0)/float64(n)/1024,
			g1-g0, (g1-g0)/float64(n))
		for _, c := range conns {
			_ = c.Close()
		}
		time.Sleep(time.Second) // lets the server release them before the next kind: a measurement
	}
	_, _ = io.WriteString(stdin, "quit\n")
	_ = child.Wait()
}

// idleHTTP2 opens a TLS connection from source that sends the HTTP/2 preface and SETTINGS only.
func idleHTTP2(t *testing.T, addr, source string) net.Conn {
	t.Helper()
	d := tls.Dialer{
		NetDialer: &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}},
		// The child's CA is its own; what is measured is the cost of a connection, not trust.
		Config: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS13}, //nolint:gosec // see above
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", source, err)
	}
	if _, err := io.WriteString(conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"); err != nil {
		t.Fatal(err)
	}
	return conn
}

// silentTCP opens a TCP connection from source that sends nothing: it holds a slot until the
// handshake deadline.
func silentTCP(t *testing.T, addr, source string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 10 * time.Second}
	conn, err := d.DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", source, err)
	}
	return conn
}

// Serves a bootstrap listener with caps beyond the measurement for its parent, reporting the
// heap and goroutines on request; it runs only in the child of TestMeasureIdleBootstrapConnectionCost.
func TestMeasureServeIdleConnections(t *testing.T) {
	if os.Getenv(envMeasureChild) == "" {
		t.Skip("runs only as the child of TestMeasureIdleBootstrapConnectionCost")
	}
	e := newListenerEnv(t, ConnectionsConfig{MaxConnections: 100000, MaxConnectionsPerSource: 100000})
	fmt.Printf("ADDR %s\n", e.addr)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() && in.Text() != "quit" {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		fmt.Printf("STATS %d %d %d\n", m.HeapInuse, m.StackInuse, runtime.NumGoroutine())
	}
}
