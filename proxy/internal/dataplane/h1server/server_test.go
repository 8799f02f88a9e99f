package h1server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Tests that a request is served whole however its bytes are split between reads: the head
// and the body (Content-Length and chunked with a trailer) cut at every byte boundary.
func TestSplitAtEveryByte(t *testing.T) {
	cases := map[string]string{
		"content-length": "POST /a?b=c HTTP/1.1\r\nHost: example.com\r\nX-A: 1\r\nx-a: 2\r\nContent-Length: 5\r\n\r\nhello",
		"chunked":        "POST /up HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n3\r\nhel\r\n2;ext=1\r\nlo\r\n0\r\nX-Sum: 5\r\n\r\n",
	}
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			got := make(chan recorded, 1)
			ts := serve(t, recorder(got), Options{})
			var want *recorded
			for i := 1; i < len(raw); i++ {
				c := ts.dial(t)
				write(t, c, raw[:i])
				drained(t, ts.serverConn(t, i-1))
				write(t, c, raw[i:])
				resp, body := readResponse(t, bufio.NewReader(c), http.MethodPost)
				rec := <-got
				if resp.StatusCode != http.StatusOK || body != "hello" || rec.Body != "hello" {
					t.Fatalf("split at %d: status %d, body %q, handler read %q (%s)", i, resp.StatusCode, body, rec.Body, rec.BodyErr)
				}
				if want == nil {
					want = &rec
				} else if d := cmp.Diff(*want, rec); d != "" {
					t.Fatalf("split at %d: request differs from split at 1 (-1 +%d):\n%s", i, i, d)
				}
				_ = c.Close()
			}
			if name == "chunked" && want.Trailer.Get("X-Sum") != "5" {
				t.Errorf("trailer = %v, want X-Sum: 5", want.Trailer)
			}
		})
	}
}

// Tests that pipelined requests are answered in order on one connection.
func TestPipelinedInOrder(t *testing.T) {
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.URL.Path)
	}), Options{})
	c := ts.dial(t)
	var b strings.Builder
	for i := range 20 {
		fmt.Fprintf(&b, "GET /%d HTTP/1.1\r\nHost: a\r\n\r\n", i)
	}
	write(t, c, b.String())
	br := bufio.NewReader(c)
	for i := range 20 {
		_, body := readResponse(t, br, http.MethodGet)
		if want := fmt.Sprintf("/%d", i); body != want {
			t.Fatalf("response %d: body %q, want %q", i, body, want)
		}
	}
}

// Tests that a request pipelined behind a refused head never reaches the handler: the refusal
// closes the connection.
func TestPipelinedBehindRefusedHead(t *testing.T) {
	var served atomic.Int32
	var refused []string
	ts := serve(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }),
		Options{Refused: func(r Refusal) { refused = append(refused, r.Reason) }})
	for name, bad := range map[string]string{
		"space before colon": "GET / HTTP/1.1\r\nHost: a\r\nX-A : 1\r\n\r\n",
		"bare LF":            "GET / HTTP/1.1\nHost: a\r\n\r\n",
		"CL and TE":          "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"two hosts":          "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			c := ts.dial(t)
			write(t, c, bad+"GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n")
			br := bufio.NewReader(c)
			resp, _ := readResponse(t, br, http.MethodGet)
			if resp.StatusCode < 400 || !resp.Close {
				t.Fatalf("status %d, close %v; want a refusal that closes", resp.StatusCode, resp.Close)
			}
			expectEOF(t, br)
		})
	}
	if n := served.Load(); n != 0 {
		t.Errorf("handler served %d requests, want 0", n)
	}
	if len(refused) != 4 {
		t.Errorf("refusals counted: %v, want 4", refused)
	}
}

// Tests that an answer to a request whose body the handler does not read reaches a client
// still sending that body: the server drops the rest for a moment before it closes, rather
// than reset the connection under the answer.
func TestAnswerBeforeBodyIsRead(t *testing.T) {
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusRequestEntityTooLarge)
	}), Options{})
	c := ts.dial(t)
	write(t, c, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 200000\r\n\r\n")
	// The whole body goes out before the answer is read, as a client that does not read
	// while it sends does.
	write(t, c, strings.Repeat("x", 200000))
	br := bufio.NewReader(c)
	if resp, _ := readResponse(t, br, http.MethodPost); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", resp.StatusCode)
	}
}

// Tests that Expect: 100-continue is answered only when the handler reads the body: a handler
// that refuses first sends its 413 and no 100.
func TestExpectContinue(t *testing.T) {
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > 4 {
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			return
		}
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	}), Options{})
	t.Run("refused before reading", func(t *testing.T) {
		c := ts.dial(t)
		write(t, c, "POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n")
		br := bufio.NewReader(c)
		resp, _ := readResponse(t, br, http.MethodPost)
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d, want 413 and no 100 before it", resp.StatusCode)
		}
		expectEOF(t, br)
	})
	t.Run("read", func(t *testing.T) {
		c := ts.dial(t)
		write(t, c, "POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
		br := bufio.NewReader(c)
		line, err := br.ReadString('\n')
		if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
			t.Fatalf("first line %q (%v), want a 100 Continue", line, err)
		}
		if blank, _ := br.ReadString('\n'); blank != "\r\n" {
			t.Fatalf("after 100: %q", blank)
		}
		write(t, c, "abc")
		resp, body := readResponse(t, br, http.MethodPost)
		if resp.StatusCode != http.StatusOK || body != "abc" {
			t.Fatalf("status %d body %q", resp.StatusCode, body)
		}
	})
}

// Tests that the 100 Continue of a request goes out whatever write deadline an earlier
// response of the connection left behind.
func TestExpectContinueAfterStaleDeadline(t *testing.T) {
	stale := time.Now().Add(100 * time.Millisecond)
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/first" {
			_ = http.NewResponseController(w).SetWriteDeadline(stale)
			_, _ = io.WriteString(w, "first")
			return
		}
		// As the proxy's handler does, the body is read before the write deadline moves.
		b, _ := io.ReadAll(r.Body)
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, _ = w.Write(b)
	}), Options{})
	c := ts.dial(t)
	br := bufio.NewReader(c)
	write(t, c, "GET /first HTTP/1.1\r\nHost: a\r\n\r\n")
	readResponse(t, br, http.MethodGet)
	poll(t, "the first response's write deadline passes", func() bool { return time.Now().After(stale) })
	write(t, c, "POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
	if line, err := br.ReadString('\n'); err != nil || line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("first line %q (%v), want a 100 Continue", line, err)
	}
	_, _ = br.ReadString('\n')
	write(t, c, "ok")
	if resp, body := readResponse(t, br, http.MethodPost); resp.StatusCode != http.StatusOK || body != "ok" {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
}

// Tests HTTP/1.0 persistence: closed after the response without keep-alive, kept with it.
func TestHTTP10(t *testing.T) {
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}), Options{})
	t.Run("without keep-alive", func(t *testing.T) {
		c := ts.dial(t)
		write(t, c, "GET / HTTP/1.0\r\n\r\n")
		br := bufio.NewReader(c)
		resp, body := readResponse(t, br, http.MethodGet)
		if resp.Proto != "HTTP/1.0" || body != "ok" {
			t.Fatalf("proto %s body %q", resp.Proto, body)
		}
		expectEOF(t, br)
	})
	t.Run("keep-alive", func(t *testing.T) {
		c := ts.dial(t)
		br := bufio.NewReader(c)
		for range 2 {
			write(t, c, "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
			resp, body := readResponse(t, br, http.MethodGet)
			if resp.Header.Get("Connection") != "keep-alive" || resp.ContentLength != 2 || body != "ok" {
				t.Fatalf("Connection %q, length %d, body %q", resp.Header.Get("Connection"), resp.ContentLength, body)
			}
		}
	})
	t.Run("keep-alive with an unknown length", func(t *testing.T) {
		ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "ok")
			w.(http.Flusher).Flush()
		}), Options{})
		c := ts.dial(t)
		write(t, c, "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
		br := bufio.NewReader(c)
		resp, body := readResponse(t, br, http.MethodGet)
		if resp.TransferEncoding != nil || body != "ok" {
			t.Fatalf("transfer encoding %v, body %q: want a close-delimited body", resp.TransferEncoding, body)
		}
		expectEOF(t, br)
	})
}

// Tests that a head arriving slowly is cut at the header deadline, counted from its first
// byte, and that the handler never sees it.
func TestSlowHeadAcrossDeadline(t *testing.T) {
	var served atomic.Int32
	ts := serve(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }),
		Options{HeaderReadTimeout: 300 * time.Millisecond})
	c := ts.dial(t)
	// A first request, then a second head one byte every 50 ms: longer than the deadline.
	write(t, c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	br := bufio.NewReader(c)
	readResponse(t, br, http.MethodGet)
	head := "GET /slow HTTP/1.1\r\nHost: a\r\nX-Pad: 0123456789\r\n\r\n"
	start := time.Now()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var err error
	for i := 0; i < len(head) && err == nil; i++ {
		<-tick.C
		_, err = c.Write([]byte{head[i]})
	}
	expectEOF(t, br)
	if d := time.Since(start); d < 250*time.Millisecond || d > 2*time.Second {
		t.Errorf("closed after %v, want about 300ms", d)
	}
	if n := served.Load(); n != 1 {
		t.Errorf("handler served %d requests, want only the first", n)
	}
}

// Tests that a connection that sends nothing is closed at the header deadline, and a
// keep-alive connection at the idle timeout.
func TestTimeouts(t *testing.T) {
	ts := serve(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}),
		Options{HeaderReadTimeout: 200 * time.Millisecond, IdleTimeout: 400 * time.Millisecond})
	t.Run("silent new connection", func(t *testing.T) {
		c := ts.dial(t)
		start := time.Now()
		expectEOF(t, bufio.NewReader(c))
		if d := time.Since(start); d < 150*time.Millisecond || d > 2*time.Second {
			t.Errorf("closed after %v, want about 200ms", d)
		}
	})
	t.Run("idle", func(t *testing.T) {
		c := ts.dial(t)
		write(t, c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
		br := bufio.NewReader(c)
		readResponse(t, br, http.MethodGet)
		start := time.Now()
		expectEOF(t, br)
		if d := time.Since(start); d < 350*time.Millisecond || d > 2*time.Second {
			t.Errorf("closed after %v, want about 400ms", d)
		}
	})
}

// Tests that a hijacking handler gets the connection and the bytes sent after the head.
func TestHijack(t *testing.T) {
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		_ = rw.Flush()
		buf := make([]byte, 5)
		if _, err := io.ReadFull(rw, buf); err != nil {
			t.Error(err)
			return
		}
		_, _ = rw.WriteString("echo:" + string(buf))
		_ = rw.Flush()
	}), Options{})
	c := ts.dial(t)
	write(t, c, "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nhel")
	br := bufio.NewReader(c)
	if resp, _ := readResponse(t, br, http.MethodGet); resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d, want 101", resp.StatusCode)
	}
	write(t, c, "lo")
	got, _ := io.ReadAll(br)
	if string(got) != "echo:hello" {
		t.Fatalf("tunnel got %q", got)
	}
}

// Tests a streamed response: chunked, with announced and prefixed trailers.
func TestChunkedResponseTrailers(t *testing.T) {
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Trailer", "X-Announced")
		_, _ = io.WriteString(w, "part1,")
		http.NewResponseController(w).Flush()
		_, _ = io.WriteString(w, strings.Repeat("x", 10000))
		w.Header().Set("X-Announced", "a")
		w.Header().Set(http.TrailerPrefix+"X-Late", "b")
	}), Options{})
	c := ts.dial(t)
	br := bufio.NewReader(c)
	for range 2 {
		write(t, c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
		resp, body := readResponse(t, br, http.MethodGet)
		if len(resp.TransferEncoding) != 1 || body != "part1,"+strings.Repeat("x", 10000) {
			t.Fatalf("transfer encoding %v, body of %d bytes", resp.TransferEncoding, len(body))
		}
		if resp.Trailer.Get("X-Announced") != "a" || resp.Trailer.Get("X-Late") != "b" {
			t.Fatalf("trailers %v", resp.Trailer)
		}
	}
}

// Tests that a response completed within one buffer gets a Content-Length and leaves in one
// write with its head, and that HEAD responses carry no body.
func TestLengthAndHEAD(t *testing.T) {
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "hello")
	}), Options{})
	c := ts.dial(t)
	br := bufio.NewReader(c)
	write(t, c, "HEAD / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n")
	resp, body := readResponse(t, br, http.MethodHead)
	if resp.ContentLength != 5 || body != "" {
		t.Fatalf("HEAD: length %d body %q", resp.ContentLength, body)
	}
	resp, body = readResponse(t, br, http.MethodGet)
	if resp.ContentLength != 5 || body != "hello" || resp.Header.Get("Date") == "" {
		t.Fatalf("GET: length %d body %q header %v", resp.ContentLength, body, resp.Header)
	}
}

// Tests the close rules: the client's Connection: close, the handler's, and a body the
// handler left unread each end the connection after the response.
func TestCloseSemantics(t *testing.T) {
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/close" {
			w.Header().Set("Connection", "close")
		}
	}), Options{})
	for name, req := range map[string]string{
		"client close":  "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
		"handler close": "GET /close HTTP/1.1\r\nHost: a\r\n\r\n",
		"unread body":   "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n0123",
	} {
		t.Run(name, func(t *testing.T) {
			c := ts.dial(t)
			write(t, c, req)
			br := bufio.NewReader(c)
			resp, _ := readResponse(t, br, http.MethodGet)
			if !resp.Close {
				t.Error("response does not close the connection")
			}
			expectEOF(t, br)
		})
	}
}

// Tests that a 103 goes out ahead of the final response.
func TestEarlyHints(t *testing.T) {
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.WriteHeader(http.StatusOK)
	}), Options{})
	c := ts.dial(t)
	write(t, c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	br := bufio.NewReader(c)
	var hints []string
	resp, _ := readResponse(t, br, http.MethodGet)
	for resp.StatusCode == http.StatusEarlyHints {
		hints = append(hints, resp.Header.Get("Link"))
		resp, _ = readResponse(t, br, http.MethodGet)
	}
	if resp.StatusCode != http.StatusOK || len(hints) != 1 || resp.Header.Get("Link") != "" {
		t.Fatalf("final status %d header %v, hints %q", resp.StatusCode, resp.Header, hints)
	}
}

// Tests that ClientGone sees a client that closed its connection, and cancels the request's
// context.
func TestClientGone(t *testing.T) {
	checked := make(chan bool, 1)
	ts := serve(t, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		w := clientWatch(r)
		deadline := time.Now().Add(5 * time.Second)
		for !w.ClientGone() && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		checked <- r.Context().Err() != nil
	}), Options{})
	c := ts.dial(t)
	write(t, c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	drained(t, ts.serverConn(t, 0))
	_ = c.Close()
	if !<-checked {
		t.Fatal("the request's context was not cancelled")
	}
}

// Tests that a client found gone gets no answer once the handler gave up: not the implicit
// empty 200, which would look whole to a client that only half-closed.
func TestGoneClientGetsNoImplicitAnswer(t *testing.T) {
	ts := serve(t, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		poll(t, "the client's half-close arrives", func() bool { return clientWatch(r).ClientGone() })
	}), Options{})
	c := ts.dial(t)
	write(t, c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	_ = c.(*net.TCPConn).CloseWrite()
	expectEOF(t, bufio.NewReader(c))
}

// Tests that Shutdown closes idle connections at once and lets a request in flight finish,
// its response closing the connection.
func TestShutdown(t *testing.T) {
	release := make(chan struct{})
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
	}), Options{})
	idle := ts.dial(t)
	write(t, idle, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	idleBr := bufio.NewReader(idle)
	readResponse(t, idleBr, http.MethodGet)
	busy := ts.dial(t)
	write(t, busy, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
	drained(t, ts.serverConn(t, 1))
	done := make(chan error, 1)
	go func() { done <- ts.Shutdown(t.Context()) }()
	expectEOF(t, idleBr)
	close(release)
	br := bufio.NewReader(busy)
	resp, _ := readResponse(t, br, http.MethodGet)
	if !resp.Close {
		t.Error("response during shutdown does not close the connection")
	}
	expectEOF(t, br)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
