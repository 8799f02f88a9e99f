package upstream

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// rawServer is a backend on raw sockets: answer writes what it sends for each request (the
// request's body read first unless early), and accepted counts its connections.
func rawServer(t *testing.T, answer func(c net.Conn, r *http.Request)) (addr string, accepted *atomic.Int32) {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = &atomic.Int32{}
	var wg sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			wg.Go(func() {
				defer func() { _ = c.Close() }()
				br := bufio.NewReader(c)
				for {
					r, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					answer(c, r)
				}
			})
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	return ln.Addr().String(), accepted
}

// exchange sends method path with body (none when empty) through rt and returns the answer's
// body.
func exchange(t *testing.T, rt http.RoundTripper, method, addr, path string, body io.Reader) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func transportOf(t *testing.T, engine http1.Engine, addr string, quarantine time.Duration) http.RoundTripper {
	t.Helper()
	p := NewPool(Options{Engine: engine, ReuseQuarantine: quarantine})
	set := p.Build(nil, update(t, nil, snaptest.Cluster(t, "ns/backend:80", addr)))
	p.Retire(nil, set)
	t.Cleanup(p.Close)
	cl := set.Cluster(0)
	return cl.Transport(cl.Next())
}

// Tests that with each engine a connection is closed after an answer without a body by
// method (HEAD) or status (204, 304), and after an answer that came before the request's body
// was written whole, and kept after an empty 200.
func TestConnectionsNotReusedAfterBodilessOrEarlyAnswers(t *testing.T) {
	t.Parallel()
	for _, engine := range http1.Engines {
		t.Run(string(engine), func(t *testing.T) {
			t.Parallel()
			addr, accepted := rawServer(t, func(c net.Conn, r *http.Request) {
				switch {
				case r.Method == http.MethodHead:
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n")
				case r.URL.Path == "/204":
					_, _ = io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
				case r.URL.Path == "/304":
					_, _ = io.WriteString(c, "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n")
				case r.URL.Path == "/early-chunked":
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\no\r\n")
					_, _ = io.Copy(io.Discard, r.Body)
					_, _ = io.WriteString(c, "1\r\nk\r\n0\r\n\r\n")
				case r.URL.Path == "/early":
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\no")
					_, _ = io.Copy(io.Discard, r.Body)
					_, _ = io.WriteString(c, "k")
				default:
					_, _ = io.Copy(io.Discard, r.Body)
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			})
			rt := transportOf(t, engine, addr, -1)
			for _, tc := range []struct {
				method, path string
				kept         bool
			}{
				{"GET", "/", true},
				{"HEAD", "/", false},
				{"GET", "/204", false},
				{"GET", "/304", false},
				{"POST", "/early", false},
				{"POST", "/early-chunked", false},
			} {
				var body io.Reader
				if tc.method == http.MethodPost {
					pr, pw := io.Pipe()
					go func() {
						// The body comes once the answer began: the backend answered early.
						time.Sleep(50 * time.Millisecond)
						_, _ = io.WriteString(pw, "body")
						_ = pw.Close()
					}()
					body = pr
				}
				if _, err := exchange(t, rt, tc.method, addr, tc.path, body); err != nil {
					t.Fatalf("%s %s: %v", tc.method, tc.path, err)
				}
				before := accepted.Load()
				if got, err := exchange(t, rt, "GET", addr, "/next", nil); err != nil || got != "ok" {
					t.Fatalf("after %s %s: %q %v", tc.method, tc.path, got, err)
				}
				if reused := accepted.Load() == before; reused != tc.kept {
					t.Errorf("after %s %s: connection reused %v, want %v", tc.method, tc.path, reused, tc.kept)
				}
			}
		})
	}
}

// Tests that with each engine bytes a backend writes past an answer, a moment after it, are
// not taken for the next request's answer when the next request comes inside the quarantine.
func TestQuarantineKeepsLateBytesFromTheNextRequest(t *testing.T) {
	t.Parallel()
	const stolen = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nstolen"
	for _, engine := range http1.Engines {
		t.Run(string(engine), func(t *testing.T) {
			t.Parallel()
			addr, _ := rawServer(t, func(c net.Conn, r *http.Request) {
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				if r.URL.Path == "/late" {
					time.Sleep(20 * time.Millisecond) // the backend's pace
					_, _ = io.WriteString(c, stolen)
				}
			})
			rt := transportOf(t, engine, addr, 200*time.Millisecond)
			if got, err := exchange(t, rt, "GET", addr, "/late", nil); err != nil || got != "ok" {
				t.Fatalf("/late: %q %v", got, err)
			}
			for i := range 5 {
				got, err := exchange(t, rt, "GET", addr, fmt.Sprintf("/next-%d", i), nil)
				if err != nil || strings.Contains(got, "stolen") {
					t.Fatalf("request %d after the late bytes: %q %v", i, got, err)
				}
			}
		})
	}
}

// Tests, in a bubble of fake time, that a reused guarded connection holds its next request
// for the rest of the quarantine after its last read, and not at all once that is over or on
// a new connection.
func TestGuardedConnectionHoldsForTheRestOfTheQuarantine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const q = 10 * time.Millisecond
		a, b := net.Pipe()
		defer func() { _ = a.Close(); _ = b.Close() }()
		c := &guardedConn{Conn: a}
		go func() { _, _ = io.WriteString(b, "x") }()
		if _, err := c.Read(make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(q / 4)
		start := time.Now()
		c.begin(context.Background(), false, true, true, true, q)
		if held := time.Since(start); held != q-q/4 {
			t.Errorf("held %s, want the rest of the quarantine, %s", held, q-q/4)
		}
		start = time.Now()
		c.begin(context.Background(), false, true, true, true, q)
		c.begin(context.Background(), false, true, true, false, q)
		if held := time.Since(start); held != 0 {
			t.Errorf("held %s after the quarantine, or on a new connection", held)
		}
	})
}
