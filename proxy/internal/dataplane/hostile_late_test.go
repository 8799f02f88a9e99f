package dataplane_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/upstream"
)

// Timing of the late-bytes tests: the backend writes its late bytes lateDelay after the answer
// they follow, well inside the quarantine the tests give the pool (lateQuarantine), and the
// victims keep coming until well past both.
const (
	lateDelay      = 20 * time.Millisecond
	lateQuarantine = 150 * time.Millisecond
	victimsFor     = 400 * time.Millisecond
)

// lateOptions is a data plane whose upstream pool quarantines connections for lateQuarantine.
func lateOptions() dataplane.Options {
	return dataplane.Options{Upstream: upstream.Options{ReuseQuarantine: lateQuarantine}}
}

// lateBackend answers /hostile with head, then after lateDelay writes a planted response on
// the same connection, and any other target plainly.
func lateBackend(t *testing.T, head string) *rawBackend {
	t.Helper()
	return newRawBackend(t, func(b *rawBackend, br *bufio.Reader, c net.Conn) {
		for {
			r, err := b.read(br)
			if err != nil {
				return
			}
			if r.RequestURI != "/hostile" {
				if _, err := io.WriteString(c, plain(r.RequestURI)); err != nil {
					return
				}
				continue
			}
			if _, err := io.WriteString(c, head); err != nil {
				return
			}
			time.Sleep(lateDelay) // the backend's own pace, which the proxy cannot see
			if _, err := io.WriteString(c, planted); err != nil {
				return
			}
		}
	})
}

// victims sends GETs from fresh clients one after another for victimsFor, and fails the test
// for every one that gets an answer that is not its own.
func victims(t *testing.T, proxy, name string) {
	t.Helper()
	var wrong, total int
	end := time.Now().Add(victimsFor)
	for i := 0; time.Now().Before(end); i++ {
		target := fmt.Sprintf("/victim-%d", i)
		c, br := rawConn(t, proxy)
		writeSplit(t, c, "GET "+target+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		rs, err := readResponses(br, 1)
		_ = c.Close()
		total++
		switch {
		case err != nil && len(rs) == 0:
			t.Errorf("%s: %s got no answer: %v", name, target, err)
			wrong++
		case rs[0].Body != "target="+target || rs[0].Header.Get("Set-Cookie") != "":
			t.Errorf("%s: %s got another's answer: %d %v %q", name, target, rs[0].Status, rs[0].Header, rs[0].Body)
			wrong++
		}
	}
	if wrong > 0 {
		t.Logf("%s: %d of %d later clients got an answer not theirs", name, wrong, total)
	}
}

// Tests that bytes a backend writes past an answer's framing some time after it (a body after
// the answer to a HEAD or after a 204 or 304, bytes past the Content-Length, a whole response
// after a chunked one) never reach a later client of the proxy as its answer: the connection
// is closed, or rests in the pool long enough for them to show before it is reused.
func TestLateBytesAfterAnAnswerReachNoLaterClient(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, method, head string }{
		{"a body after the answer to HEAD", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n"},
		{"a body after a 204", "GET", "HTTP/1.1 204 No Content\r\n\r\n"},
		{"a body after a 304", "GET", "HTTP/1.1 304 Not Modified\r\n\r\n"},
		{"bytes past the Content-Length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
		{"a response after a chunked answer", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			be := lateBackend(t, tc.head)
			proxy := routeAll(t, start(t, lateOptions()), be.addr())
			for round := range 2 {
				c, br := rawConn(t, proxy)
				writeSplit(t, c, tc.method+" /hostile HTTP/1.1\r\nHost: x\r\n\r\n")
				if _, err := readHostile(br, tc.method); err != nil {
					t.Fatalf("round %d: the hostile answer: %v", round, err)
				}
				_ = c.Close()
				victims(t, proxy, fmt.Sprintf("round %d", round))
			}
		})
	}
}

// Tests that a connection on which the backend answered before the request's body was sent
// whole is not reused: such a backend may read the body as a request of its own and answer it
// later, and that answer must reach no other client.
func TestEarlyAnswerClosesTheBackendConnection(t *testing.T) {
	t.Parallel()
	const smuggled = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	var answered atomic.Int64
	be := newRawBackend(t, func(b *rawBackend, br *bufio.Reader, c net.Conn) {
		for {
			r, err := b.read(br)
			if err != nil {
				return
			}
			switch r.RequestURI {
			case "/early":
				// The answer starts before the body is read, and ends once the body (taken
				// for a request) came.
				if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\no"); err != nil {
					return
				}
				if _, err := b.read(br); err != nil {
					return
				}
				if _, err := io.WriteString(c, "k"); err != nil {
					return
				}
				answered.Add(1)
				time.Sleep(lateQuarantine + 50*time.Millisecond) // past the quarantine
				if _, err := io.WriteString(c, planted); err != nil {
					return
				}
			default:
				if _, err := io.WriteString(c, plain(r.RequestURI)); err != nil {
					return
				}
			}
		}
	})
	proxy := routeAll(t, start(t, lateOptions()), be.addr())
	c, br := rawConn(t, proxy)
	writeSplit(t, c, fmt.Sprintf("POST /early HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", len(smuggled)))
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Fatalf("the early answer: %q, %v", line, err)
	}
	writeSplit(t, c, smuggled)
	eventually(t, "the backend ended its early answer", func() bool { return answered.Load() == 1 })
	_ = c.Close()
	victims(t, proxy, "after an early answer")
}

// Tests that a request whose reused backend connection is closed before any byte of an answer
// (the backend closed it idle as the request left) is sent once more on a new connection when
// its method is idempotent, though the route has no retry policy, and that a POST is not: it
// gets a 502 and reaches the backend once.
func TestStaleConnectionRetriedOnceForIdempotentRequests(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		method string
		status int
		sent   int
	}{
		{"GET", 200, 2},
		{"HEAD", 200, 2},
		{"PUT", 200, 2},
		{"DELETE", 200, 2},
		{"POST", 502, 1},
	} {
		t.Run(tc.method, func(t *testing.T) {
			t.Parallel()
			be := newRawBackend(t, func(b *rawBackend, br *bufio.Reader, c net.Conn) {
				for served := 0; ; served++ {
					r, err := b.read(br)
					if err != nil || served == 1 {
						return // the second request on a connection finds it closed
					}
					if _, err := io.WriteString(c, plain(r.RequestURI)); err != nil {
						return
					}
				}
			})
			opts := dataplane.Options{Upstream: upstream.Options{ReuseQuarantine: -1}}
			proxy := routeAll(t, start(t, opts), be.addr())
			c, br := rawConn(t, proxy)
			writeSplit(t, c, "GET /warm HTTP/1.1\r\nHost: x\r\n\r\n")
			if rs, err := readResponses(br, 1); err != nil || rs[0].Status != 200 {
				t.Fatalf("the first request: %v %v", rs, err)
			}
			writeSplit(t, c, tc.method+" /again HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
			got, err := readHostile(br, tc.method)
			if err != nil || got.Status != tc.status {
				t.Errorf("%s on a stale connection: %+v %v, want %d", tc.method, got, err, tc.status)
			}
			var sent int
			for _, r := range be.requests() {
				if r.RequestURI == "/again" {
					sent++
				}
			}
			if sent != tc.sent {
				t.Errorf("the backend received the %s %d times, want %d", tc.method, sent, tc.sent)
			}
		})
	}
}
