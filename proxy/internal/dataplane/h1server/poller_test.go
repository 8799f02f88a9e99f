//go:build linux

package h1server

import (
	"bufio"
	"io"
	"net/http"
	"testing"
	"time"
)

// parkedCount returns how many connections wait in ts's idle poller.
func (ts *testServer) parkedCount() int {
	p := ts.poller()
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.parked)
}

// Tests that a connection parked in the idle poller is served again when its next request
// arrives, even one split across writes, and parks again after it.
func TestParkedConnectionServedAgain(t *testing.T) {
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.URL.Path)
	}), Options{ParkAfter: 50 * time.Millisecond})
	c := ts.dial(t)
	br := bufio.NewReader(c)
	for _, path := range []string{"/1", "/2", "/3"} {
		poll(t, "the connection parks", func() bool { return path == "/1" || ts.parkedCount() == 1 })
		write(t, c, "GET "+path+" HTTP/1.1\r\n")
		if path == "/2" {
			drained(t, ts.serverConn(t, 0))
		}
		write(t, c, "Host: a\r\n\r\n")
		if _, body := readResponse(t, br, http.MethodGet); body != path {
			t.Fatalf("body %q, want %q", body, path)
		}
	}
	poll(t, "the connection parks", func() bool { return ts.parkedCount() == 1 })
	if n := ts.Open(); n != 1 {
		t.Errorf("server tracks %d connections, want the parked one", n)
	}
}

// Tests that a parked connection whose client closes is released, and one that stays idle is
// closed at its idle timeout.
func TestParkedConnectionEnds(t *testing.T) {
	ts := serve(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}),
		Options{ParkAfter: 50 * time.Millisecond, IdleTimeout: 1500 * time.Millisecond})
	closing, idle := ts.dial(t), ts.dial(t)
	for _, c := range []interface{ Write([]byte) (int, error) }{closing, idle} {
		_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n"))
	}
	readResponse(t, bufio.NewReader(closing), http.MethodGet)
	idleBr := bufio.NewReader(idle)
	readResponse(t, idleBr, http.MethodGet)
	poll(t, "both connections park", func() bool { return ts.parkedCount() == 2 })
	start := time.Now()
	_ = closing.Close()
	poll(t, "the closed connection is released", func() bool { return ts.Open() == 1 })
	expectEOF(t, idleBr)
	if d := time.Since(start); d < time.Second || d > 4*time.Second {
		t.Errorf("idle parked connection closed after %v, want about its idle timeout", d)
	}
	poll(t, "the idle connection is released", func() bool { return ts.Open() == 0 })
}

// Tests that Shutdown closes parked connections and stops the poller.
func TestShutdownClosesParked(t *testing.T) {
	ts := serve(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), Options{ParkAfter: 20 * time.Millisecond})
	c := ts.dial(t)
	write(t, c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	br := bufio.NewReader(c)
	readResponse(t, br, http.MethodGet)
	poll(t, "the connection parks", func() bool { return ts.parkedCount() == 1 })
	if err := ts.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	expectEOF(t, br)
	if n := ts.Open(); n != 0 {
		t.Errorf("%d connections left", n)
	}
}
