package h1client

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// Tests that a connection back from an answer is not taken again before its quarantine is
// over (a request meanwhile gets a new connection, and the rested one serves once rested),
// and that bytes the backend wrote past an answer during the quarantine retire the connection
// at the peek that ends it.
func TestReuseQuarantine(t *testing.T) {
	t.Parallel()
	const quarantine = 200 * time.Millisecond
	late := make(chan struct{})
	be := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		for {
			r, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			answer := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
			if r.URL.Path == "/late" {
				answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nstolen"
				if _, err := io.WriteString(c, answer[:len("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")]); err != nil {
					return
				}
				<-late
				answer = answer[len("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"):]
			}
			if _, err := io.WriteString(c, answer); err != nil {
				return
			}
		}
	})
	tr := newTransport(t, Options{Address: be.addr(), ReuseQuarantine: quarantine})
	start := time.Now()
	for i, want := range []int32{1, 2} {
		if _, body, err := get(t, tr, be.addr(), "/"); err != nil || body != "ok" {
			t.Fatalf("request %d: %q %v", i, body, err)
		}
		if n := be.accepted.Load(); n != want && time.Since(start) < quarantine {
			t.Fatalf("request %d inside the quarantine: %d connections, want %d", i, n, want)
		}
	}
	if !eventually(t, 5*time.Second, func() bool { return time.Since(start) > 2*quarantine }) {
		t.Fatal("no time passed")
	}
	if _, body, err := get(t, tr, be.addr(), "/"); err != nil || body != "ok" || be.accepted.Load() != 2 {
		t.Fatalf("after the quarantine: %q %v, %d connections, want a rested one reused", body, err, be.accepted.Load())
	}
	// The answer to /late is followed by a response the backend writes inside the quarantine.
	if _, body, err := get(t, tr, be.addr(), "/late"); err != nil || body != "ok" {
		t.Fatalf("/late: %q %v", body, err)
	}
	close(late)
	rested := time.Now()
	if !eventually(t, 5*time.Second, func() bool { return time.Since(rested) > 2*quarantine }) {
		t.Fatal("no time passed")
	}
	for i := range 3 {
		if _, body, err := get(t, tr, be.addr(), fmt.Sprintf("/after-%d", i)); err != nil || body != "ok" {
			t.Fatalf("after the late bytes: %q %v, the backend's leftover taken for an answer", body, err)
		}
	}
}

// Tests that a connection is closed, not pooled, after an answer without a body by its
// request's method (HEAD) or its status (204, 304), while one after an empty 200 is kept.
func TestBodilessAnswersCloseTheConnection(t *testing.T) {
	t.Parallel()
	be := newRawBackend(t, serveEach(func(r *http.Request) string {
		switch r.URL.Path {
		case "/204":
			return "HTTP/1.1 204 No Content\r\n\r\n"
		case "/304":
			return "HTTP/1.1 304 Not Modified\r\n\r\n"
		}
		return "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
	}))
	tr := newTransport(t, Options{Address: be.addr()})
	for _, tc := range []struct {
		method, path string
		idle         int
	}{
		{http.MethodGet, "/", 1},
		{http.MethodHead, "/", 0},
		{http.MethodGet, "/204", 0},
		{http.MethodGet, "/304", 0},
	} {
		if _, _, err := do(t, tr, mustRequest(t, tc.method, "http://x"+tc.path, nil)); err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		if n := tr.IdleConns(); n != tc.idle {
			t.Errorf("%s %s: %d idle connections, want %d", tc.method, tc.path, n, tc.idle)
		}
		tr.CloseIdleConnections()
	}
}

// Tests that a connection whose backend answered before it had the request's body whole is
// closed once the exchange ends, though the body went out whole in the end.
func TestEarlyAnswerIsNotPooled(t *testing.T) {
	t.Parallel()
	be := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		for {
			r, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\no"); err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, r.Body)
			if _, err := io.WriteString(c, "k"); err != nil {
				return
			}
		}
	})
	tr := newTransport(t, Options{Address: be.addr()})
	pr, pw := io.Pipe()
	req := mustRequest(t, http.MethodPost, "http://x/", pr)
	req.ContentLength = 4
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(pw, "body"); err != nil {
		t.Fatal(err)
	}
	_ = pw.Close()
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || string(b) != "ok" {
		t.Fatalf("%q %v", b, err)
	}
	if n := tr.IdleConns(); n != 0 {
		t.Errorf("%d idle connections after an early answer, want 0", n)
	}
}

// Tests that PUT and DELETE, idempotent by RFC 9110, go once more on a new connection when
// their reused one was closed before any byte of an answer, as GET does.
func TestIdempotentRequestRetriedAfterClosedReusedConnection(t *testing.T) {
	t.Parallel()
	for _, method := range []string{http.MethodPut, http.MethodDelete} {
		be := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
			for served := 0; ; served++ {
				r, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, r.Body)
				if served == 1 {
					return
				}
				if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
					return
				}
			}
		})
		tr := newTransport(t, Options{Address: be.addr()})
		if _, _, err := get(t, tr, be.addr(), "/"); err != nil {
			t.Fatal(err)
		}
		req := mustRequest(t, method, "http://x/", strings.NewReader("v"))
		if code, body, err := do(t, tr, req); err != nil || code != 200 || body != "ok" {
			t.Errorf("%s on a connection closed before answering: %d %q %v", method, code, body, err)
		}
		if n := be.accepted.Load(); n != 2 {
			t.Errorf("%s: %d connections, want 2", method, n)
		}
	}
}

// Tests, on the pool alone and in a bubble of fake time, that a checkout takes the most
// recently used connection whose quarantine is over, leaves the younger ones in the pool, and
// finds none while every connection still rests.
func TestCheckoutTakesTheYoungestRestedConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const q = 10 * time.Millisecond
		tr := New(Options{Address: "192.0.2.1:80", ReuseQuarantine: q})
		defer tr.CloseIdleConnections()
		idle := func() *conn {
			a, b := net.Pipe()
			t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
			return &conn{t: tr, nc: a, raw: a}
		}
		older, younger := idle(), idle()
		tr.put(older)
		time.Sleep(q / 2)
		tr.put(younger)
		if c := tr.popIdle(); c != nil {
			t.Fatal("a connection was taken inside its quarantine")
		}
		time.Sleep(q / 2)
		if c := tr.popIdle(); c != older {
			t.Fatal("the rested connection was not taken while the younger one rests")
		}
		if c := tr.popIdle(); c != nil {
			t.Fatal("the younger connection was taken inside its quarantine")
		}
		time.Sleep(q / 2)
		if c := tr.popIdle(); c != younger {
			t.Fatal("the younger connection was not taken once rested")
		}
		if n := tr.IdleConns(); n != 0 {
			t.Errorf("%d idle connections left", n)
		}
	})
}
