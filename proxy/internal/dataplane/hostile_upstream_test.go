package dataplane_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
)

// answering is a raw backend that reads each request's head (a request of these tests has no
// body) and writes what answer returns for its target, closing the connection after an answer
// that ends with close.
func answering(t *testing.T, answer func(target string) (raw string, closeAfter bool)) *rawBackend {
	t.Helper()
	return newRawBackend(t, func(b *rawBackend, br *bufio.Reader, c net.Conn) {
		for {
			r, err := b.read(br)
			if err != nil {
				return
			}
			raw, closeAfter := answer(r.RequestURI)
			if _, err := io.WriteString(c, raw); err != nil || closeAfter {
				return
			}
		}
	})
}

// plain is the answer of a backend that behaves: 200 with a body naming the target.
func plain(target string) string {
	body := "target=" + target
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

// planted is a whole response a hostile backend leaves on its connection after the one it was
// asked for: whoever reads that connection next must not take it as theirs.
const planted = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\nSet-Cookie: session=victim\r\n\r\nstolen"

// Tests what the proxy does with backends that frame their answers wrong: an answer longer
// than its Content-Length, bytes after an answer, a body on a 204 or on the answer to a HEAD
// never reach the next request on a pooled connection; an answer shorter than announced is not
// handed over as complete; a backend that closes in the middle of its head gets the client a
// 502 on a connection that keeps serving.
func TestHostileBackendAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, method string
		answer       string
		// status is what the client gets for the hostile answer; 0 when the answer is cut short,
		// then the client's connection must close before the body ends.
		status int
		body   string
		// nethttp is the status and body where net/http's Transport reads the answer and differs.
		nethttp *[2]string
	}{
		{"an answer longer than its Content-Length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA" + planted, 200, "ok", nil},
		{"a whole response after the answer", "GET", plain("/hostile") + planted, 200, "target=/hostile", nil},
		{"a 204 with a body", "GET", "HTTP/1.1 204 No Content\r\nContent-Length: 6\r\n\r\n" + planted, 204, "", nil},
		{"a body on the answer to HEAD", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nstolen" + planted, 200, "", nil},
		{"an answer shorter than its Content-Length, then close", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", 0, "", nil},
		{"a chunked answer cut before its last chunk", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nshort\r\n", 0, "", nil},
		{"a close in the middle of a field", "GET", "HTTP/1.1 200 OK\r\nContent-Le", 502, "", nil},
		{"a close in the middle of the status line", "GET", "HTTP/1.1 2", 502, "", nil},
		{"a close after the status line", "GET", "HTTP/1.1 200 OK\r\n", 502, "", nil},
		{"two different Content-Lengths", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok" + planted, 502, "", nil},
		{"a head ended by bare LFs", "GET", "HTTP/1.1 200 OK\nContent-Length: 2\n\nok" + planted, 502, "", &[2]string{"200", "ok"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			be := answering(t, func(target string) (string, bool) {
				if target == "/hostile" {
					// The backend keeps a connection it left bytes on: reading them is the
					// proxy's mistake to make.
					return tc.answer, tc.status == 0 || strings.HasPrefix(tc.name, "a close")
				}
				return plain(target), false
			})
			proxy := routeAll(t, start(t, dataplane.Options{}), be.addr())
			status, body := tc.status, tc.body
			if tc.nethttp != nil && running.client == http1.EngineNetHTTP {
				_, _ = fmt.Sscan(tc.nethttp[0], &status)
				body = tc.nethttp[1]
			}
			c, br := rawConn(t, proxy)
			writeSplit(t, c, tc.method+" /hostile HTTP/1.1\r\nHost: x\r\n\r\n")
			got, err := readHostile(br, tc.method)
			switch {
			case status == 0:
				if err == nil {
					t.Fatalf("a cut answer was handed over as complete: %+v", got)
				}
				return
			case err != nil || got.Status != status || got.Body != body:
				t.Fatalf("got %+v, %v; want %d %q", got, err, status, body)
			}
			// The next requests on the same client connection reach the backend over the pool:
			// each gets its own answer.
			for i := range 3 {
				target := fmt.Sprintf("/next-%d", i)
				writeSplit(t, c, "GET "+target+" HTTP/1.1\r\nHost: x\r\n\r\n")
				rs, err := readResponses(br, 1)
				if err != nil || rs[0].Status != 200 || rs[0].Body != "target="+target || strings.Contains(rs[0].Header.Get("Set-Cookie"), "victim") {
					t.Fatalf("%s got %+v, %v: another request's answer", target, rs, err)
				}
			}
			var hostile int
			for _, r := range be.requests() {
				if r.RequestURI == "/hostile" {
					hostile++
				}
			}
			if hostile != 1 {
				t.Errorf("backend received /hostile %d times, want once", hostile)
			}
		})
	}
}

// readHostile reads one response to a request of method from br.
func readHostile(br *bufio.Reader, method string) (seen, error) {
	if method != "HEAD" {
		rs, err := readResponses(br, 1)
		if len(rs) == 0 {
			return seen{}, err
		}
		return rs[0], err
	}
	line, err := br.ReadString('\n')
	if err != nil {
		return seen{}, err
	}
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			return seen{}, err
		}
		if l == "\r\n" {
			break
		}
	}
	var s seen
	_, err = fmt.Sscanf(line, "HTTP/1.1 %d", &s.Status)
	return s, err
}

// Tests that a client which half-closes its connection after a whole request (shutdown of its
// sending side, as HTTP/1.0 tools do) gets the backend's answer or none, never an empty answer
// that looks whole.
func TestHalfClosedClientGetsNoEmptyAnswer(t *testing.T) {
	t.Parallel()
	app, _ := backend(t, "app")
	proxy := routeAll(t, start(t, dataplane.Options{}), hostPort(app))
	for _, version := range []string{"HTTP/1.1", "HTTP/1.0"} {
		c, br := rawConn(t, proxy)
		writeSplit(t, c, "GET /half "+version+"\r\nHost: x\r\nX-Sleep: 200ms\r\n\r\n")
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		rs, err := readResponses(br, 1)
		if err == nil && (rs[0].Status != 200 || rs[0].Header.Get("X-Backend") != "app") {
			t.Errorf("%s: a half-closed client got %d %v %q, not the backend's answer", version, rs[0].Status, rs[0].Header, rs[0].Body)
		}
	}
}
