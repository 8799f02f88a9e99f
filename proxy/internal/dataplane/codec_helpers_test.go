package dataplane_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"coxswain.dev/coxswain/proxy/internal/dataplane"
)

// recorded is one request a recording backend received: its head as the backend parsed it
// (names canonical), its body, and whether the body arrived whole.
type recorded struct {
	Method, Target, Host, Proto string
	Header                      http.Header
	Framing                     string
	Body                        string
	Whole                       bool
}

// String is the request in one line, for failure messages.
func (r recorded) String() string {
	whole := ""
	if !r.Whole {
		whole = " (cut)"
	}
	return fmt.Sprintf("%s %s %s host=%q %s body=%q%s", r.Method, r.Target, r.Proto, r.Host, r.Framing, r.Body, whole)
}

// recorder is a raw backend that reads each request whole, records it, and answers 200 with a
// body naming the method, the target and the body's length (its length only to a HEAD); a request whose body does not
// arrive whole is recorded as cut and its connection closed.
type recorder struct {
	*rawBackend
	mu  sync.Mutex
	got []recorded
}

func newRecorder(t *testing.T) *recorder {
	t.Helper()
	rec := &recorder{}
	rec.rawBackend = newRawBackend(t, func(b *rawBackend, br *bufio.Reader, c net.Conn) {
		for {
			r, err := b.read(br)
			if err != nil {
				return
			}
			got := rec.take(r)
			if !got.Whole {
				return
			}
			body := fmt.Sprintf("%s %s %d", got.Method, got.Target, len(got.Body))
			head := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\nX-Seen: %s\r\n\r\n", len(body), got.Method)
			if got.Method == http.MethodHead {
				body = ""
			}
			if _, err := io.WriteString(c, head+body); err != nil {
				return
			}
		}
	})
	return rec
}

// take reads r's body and records r.
func (rec *recorder) take(r *http.Request) recorded {
	body, err := io.ReadAll(r.Body)
	got := recorded{
		Method: r.Method, Target: r.RequestURI, Host: r.Host, Proto: r.Proto, Header: r.Header,
		Framing: framing(r), Body: string(body), Whole: err == nil,
	}
	rec.mu.Lock()
	rec.got = append(rec.got, got)
	rec.mu.Unlock()
	return got
}

// framing says how a request's body was framed on the wire.
func framing(r *http.Request) string {
	switch {
	case len(r.TransferEncoding) > 0:
		return "te=" + strings.Join(r.TransferEncoding, ",")
	case r.ContentLength > 0:
		return fmt.Sprintf("cl=%d", r.ContentLength)
	}
	return "empty"
}

// requests returns what the backend received, without the probes stayedOpen sends.
func (rec *recorder) requests() []recorded {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var out []recorded
	for _, r := range rec.got {
		if r.Target != probeTarget {
			out = append(out, r)
		}
	}
	return out
}

// targets returns "METHOD target body" of every request received whole, and "cut: ..." of
// every one cut short.
func (rec *recorder) targets() []string {
	var out []string
	for _, r := range rec.requests() {
		s := r.Method + " " + r.Target
		if r.Host != "x" {
			s += " host=" + r.Host
		}
		switch {
		case !r.Whole:
			s = "cut: " + s
		case r.Body != "":
			s += " " + r.Body
		}
		out = append(out, s)
	}
	return out
}

// recordingProxy starts a data plane with opts routing everything to a new recorder, and
// returns the proxy's address and the recorder.
func recordingProxy(t *testing.T, opts dataplane.Options) (string, *recorder) {
	t.Helper()
	rec := newRecorder(t)
	d := start(t, opts)
	return routeAll(t, d, rec.addr()), rec
}

// splitPause is how long writeSplit waits between pieces, so that the proxy can read the piece
// before alone. It synchronises nothing: a read that takes two pieces at once is a split the
// verdict must not depend on either.
const splitPause = time.Millisecond

// writeSplit writes pieces to c one after another, pausing between them.
func writeSplit(t *testing.T, c net.Conn, pieces ...string) {
	t.Helper()
	for i, p := range pieces {
		if i > 0 {
			time.Sleep(splitPause)
		}
		if _, err := io.WriteString(c, p); err != nil {
			// The proxy may close as soon as it refused what came before.
			return
		}
	}
}

// splitAt cuts raw at the given offsets, in increasing order.
func splitAt(raw string, at ...int) []string {
	var pieces []string
	last := 0
	for _, i := range at {
		if i <= last || i >= len(raw) {
			continue
		}
		pieces = append(pieces, raw[last:i])
		last = i
	}
	return append(pieces, raw[last:])
}

// seen is one response a raw client read.
type seen struct {
	Status int
	Header http.Header
	Body   string
	// Close says the proxy announced it closes the connection.
	Close bool
}

// readResponses reads up to n responses from br, each with its body, and stops at the first
// that cannot be read.
func readResponses(br *bufio.Reader, n int) ([]seen, error) {
	var out []seen
	for range n {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return out, err
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		out = append(out, seen{Status: resp.StatusCode, Header: resp.Header, Body: string(body), Close: resp.Close})
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

func statuses(rs []seen) []int {
	out := make([]int, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.Status)
	}
	return out
}

// probeTarget is the target of the request stayedOpen sends.
const probeTarget = "/probe"

// stayedOpen says whether the connection still serves requests in step: a request written now
// gets the backend's answer to it. A connection the proxy closed, or one whose next answer is
// another's, did not stay open.
func stayedOpen(c net.Conn, br *bufio.Reader) bool {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET "+probeTarget+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return false
	}
	rs, err := readResponses(br, 1)
	return err == nil && rs[0].Status == 200 && rs[0].Body == "GET "+probeTarget+" 0"
}

// closedSoon says whether the proxy closes c within two seconds, whatever it still sends.
func closedSoon(c net.Conn) bool { return closedByPeer(c, 2*time.Second) }
