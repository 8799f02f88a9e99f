package h1client

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
)

// Tests that a response carrying more bytes than it announced gives its announced body, and
// that its connection is not reused: the extra bytes would be taken for the next response.
func TestResponseLongerThanAnnouncedIsNotReused(t *testing.T) {
	t.Parallel()
	be := newRawBackend(t, serveEach(func(r *http.Request) string {
		if r.URL.Path == "/long" {
			return "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled"
		}
		return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	}))
	tr := newTransport(t, Options{Address: be.addr()})
	if _, body, err := get(t, tr, be.addr(), "/long"); err != nil || body != "hello" {
		t.Fatalf("got %q %v, want the announced hello", body, err)
	}
	if _, body, err := get(t, tr, be.addr(), "/next"); err != nil || body != "ok" {
		t.Fatalf("the next request got %q %v: the extra bytes were read as its response", body, err)
	}
	if n := be.accepted.Load(); n != 2 {
		t.Errorf("%d connections, want 2 (the first not reused)", n)
	}
}

// Tests that a body cut short by the backend closing is an error, never a complete body.
func TestResponseShorterThanAnnouncedFails(t *testing.T) {
	t.Parallel()
	for name, raw := range map[string]string{
		"Content-Length": "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this",
		"chunked":        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			be := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
				if _, err := http.ReadRequest(br); err == nil {
					_, _ = io.WriteString(c, raw)
				}
			})
			tr := newTransport(t, Options{Address: be.addr()})
			if _, body, err := get(t, tr, be.addr(), "/"); !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("got %q %v, want io.ErrUnexpectedEOF", body, err)
			}
			if n := tr.IdleConns(); n != 0 {
				t.Errorf("%d idle connections after a cut body", n)
			}
		})
	}
}

// Tests that a backend closing inside the head, or before it, fails the exchange.
func TestBackendClosingMidHead(t *testing.T) {
	t.Parallel()
	for name, raw := range map[string]string{
		"before the head":       "",
		"inside the status":     "HTTP/1.1 20",
		"inside a field":        "HTTP/1.1 200 OK\r\nContent-Le",
		"before the empty line": "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			be := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
				if _, err := http.ReadRequest(br); err == nil {
					_, _ = io.WriteString(c, raw)
				}
			})
			tr := newTransport(t, Options{Address: be.addr()})
			if resp, err := tr.RoundTrip(mustRequest(t, http.MethodGet, "http://x/", nil)); err == nil {
				_ = resp.Body.Close()
				t.Fatal("a head cut short was accepted")
			}
		})
	}
}

// Tests that response heads the parser refuses fail the exchange with the parser's reason and
// close the connection, and that Transfer-Encoding with Content-Length is framed by the
// chunked coding but never reused.
func TestStrictResponseFraming(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ raw, reason string }{
		"bare LF":                  {"HTTP/1.1 200 OK\nContent-Length: 2\n\nok", http1.ReasonRespBareLF},
		"duplicate Content-Length": {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok", http1.ReasonRespDuplicateCL},
		"a Content-Length list":    {"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok", http1.ReasonRespContentLength},
		"gzip, chunked":            {"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", http1.ReasonRespTE},
		"obs-fold":                 {"HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 2\r\n\r\nok", http1.ReasonRespObsFold},
		"a space before the colon": {"HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nok", http1.ReasonRespSpaceColon},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			be := newRawBackend(t, serveEach(func(*http.Request) string { return tc.raw }))
			tr := newTransport(t, Options{Address: be.addr()})
			_, _, err := get(t, tr, be.addr(), "/")
			var e *http1.Error
			if !errors.As(err, &e) || e.Reason != tc.reason {
				t.Fatalf("got %v, want a refusal %s", err, tc.reason)
			}
			if n := tr.IdleConns(); n != 0 {
				t.Errorf("%d idle connections after a refused head", n)
			}
		})
	}
	t.Run("chunked with Content-Length", func(t *testing.T) {
		t.Parallel()
		be := newRawBackend(t, serveEach(func(*http.Request) string {
			return "HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"
		}))
		tr := newTransport(t, Options{Address: be.addr()})
		for range 2 {
			if _, body, err := get(t, tr, be.addr(), "/"); err != nil || body != "ok" {
				t.Fatalf("got %q %v, want the chunked body", body, err)
			}
		}
		if n := be.accepted.Load(); n != 2 {
			t.Errorf("%d connections, want 2: a response with both framings is not reused", n)
		}
	})
}

// Tests that a backend sending 1xx responses without end is cut off after MaxInformational.
func TestInformationalFloodIsBounded(t *testing.T) {
	t.Parallel()
	be := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		for {
			if _, err := io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"); err != nil {
				return
			}
		}
	})
	tr := newTransport(t, Options{Address: be.addr()})
	if _, _, err := get(t, tr, be.addr(), "/"); !errors.Is(err, ErrTooManyInformational) {
		t.Fatalf("got %v, want ErrTooManyInformational", err)
	}
}

// Tests that 204, 304 and a response to HEAD end at their head even when the backend sends a
// body after it, and that the connection is then not reused (its bytes are left over).
func TestNoBodyResponsesWithABody(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ method, raw string }{
		"204":  {http.MethodGet, "HTTP/1.1 204 No Content\r\n\r\njunk"},
		"304":  {http.MethodGet, "HTTP/1.1 304 Not Modified\r\nContent-Length: 4\r\n\r\njunk"},
		"HEAD": {http.MethodHead, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\njunk"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			be := newRawBackend(t, serveEach(func(r *http.Request) string {
				if r.URL.Path == "/next" {
					return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
				}
				return tc.raw
			}))
			tr := newTransport(t, Options{Address: be.addr()})
			resp, err := tr.RoundTrip(mustRequest(t, tc.method, "http://x/", nil))
			if err != nil {
				t.Fatal(err)
			}
			if resp.Body != http.NoBody {
				t.Errorf("body %T, want none", resp.Body)
			}
			_ = resp.Body.Close()
			if _, body, err := get(t, tr, be.addr(), "/next"); err != nil || body != "ok" {
				t.Fatalf("the next request got %q %v", body, err)
			}
			if n := be.accepted.Load(); n != 2 {
				t.Errorf("%d connections, want 2", n)
			}
		})
	}
}

// Tests that a body without Content-Length or chunked coding is read until the backend closes,
// whole, and that HTTP/1.0 without keep-alive is not reused.
func TestCloseDelimitedBody(t *testing.T) {
	t.Parallel()
	be := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err == nil {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\n\r\n"+repeat("z", 100000))
		}
	})
	tr := newTransport(t, Options{Address: be.addr()})
	resp, err := tr.RoundTrip(mustRequest(t, http.MethodGet, "http://x/", nil))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || len(b) != 100000 || resp.ContentLength != -1 || !resp.Close {
		t.Errorf("read %d bytes, %v, length %d, close %v", len(b), err, resp.ContentLength, resp.Close)
	}
	if n := tr.IdleConns(); n != 0 {
		t.Errorf("%d idle connections after a close-delimited body", n)
	}
}

// Tests that a backend answering an upload before reading its body gets its answer through:
// the pump sends the body while the response is read, stops once it ends, and the connection
// is closed rather than reused.
func TestEarlyAnswerDuringUpload(t *testing.T) {
	t.Parallel()
	be := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err == nil {
			_, _ = io.WriteString(c, "HTTP/1.1 413 Payload Too Large\r\nContent-Length: 4\r\n\r\nnope")
			_, _ = io.Copy(io.Discard, br)
		}
	})
	tr := newTransport(t, Options{Address: be.addr()})
	body := &blockingReader{first: repeat("u", 1000), release: make(chan struct{})}
	defer close(body.release)
	req := mustRequest(t, http.MethodPut, "http://x/", body)
	req.ContentLength = 10 << 20
	done := make(chan struct{})
	var code int
	var got string
	var err error
	go func() {
		defer close(done)
		code, got, err = do(t, tr, req)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("no answer while the upload waits: the exchange waits for the body")
	}
	if err != nil || code != 413 || got != "nope" {
		t.Errorf("got %d %q %v, want the backend's 413", code, got, err)
	}
	if n := tr.IdleConns(); n != 0 {
		t.Errorf("%d idle connections after an answer to a body not sent whole", n)
	}
}

// Tests the waits on a backend that stalls: before its head, the first-byte timeout ends the
// exchange with a timeout error; after its head, the request's deadline ends the body read;
// the backend sees its connection closed either way.
func TestStallingBackend(t *testing.T) {
	t.Parallel()
	closed := make(chan string, 2)
	be := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		r, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if r.URL.Path == "/body" {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab")
		}
		_, _ = br.ReadByte() // until the proxy closes
		closed <- r.URL.Path
	})
	tr := newTransport(t, Options{Address: be.addr(), FirstByteTimeout: 200 * time.Millisecond})
	begin := time.Now()
	_, _, err := get(t, tr, be.addr(), "/head")
	if !isTimeout(err) || time.Since(begin) > 3*time.Second {
		t.Errorf("a backend without a head: %v after %s, want a timeout after about 200ms", err, time.Since(begin))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req := mustRequest(t, http.MethodGet, "http://x/body", nil).WithContext(ctx)
	if _, body, err := do(t, tr, req); err == nil {
		t.Errorf("a stalled body read whole: %q", body)
	}
	for range 2 {
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Fatal("the backend's connection stayed open")
		}
	}
}

// goneWatch is a ClientWatch whose client leaves when told.
type goneWatch struct{ gone atomic.Bool }

func (w *goneWatch) ClientGone() bool { return w.gone.Load() }

// Tests that a client leaving while the backend thinks closes the backend's connection within
// a slice of the wait, with no read of the client's own (nginx's broken-connection check).
func TestClientGoneWhileTheBackendThinks(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	closed := make(chan struct{})
	be := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		close(arrived)
		_, _ = br.ReadByte()
		close(closed)
	})
	tr := newTransport(t, Options{Address: be.addr(), WatchInterval: 50 * time.Millisecond})
	w := &goneWatch{}
	req := mustRequest(t, http.MethodGet, "http://x/", nil)
	req = req.WithContext(http1.WithClientWatch(req.Context(), w))
	errc := make(chan error, 1)
	go func() {
		_, _, err := do(t, tr, req)
		errc <- err
	}()
	<-arrived
	w.gone.Store(true)
	left := time.Now()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the backend's connection stayed open after the client left")
	}
	if took := time.Since(left); took > time.Second {
		t.Errorf("the backend saw the close %s after the client left, want within a slice", took)
	}
	if err := <-errc; !errors.Is(err, ErrClientGone) {
		t.Errorf("got %v, want ErrClientGone", err)
	}
}

// Tests that cancelling the request's context while the backend thinks ends the exchange at
// once with the context's error and closes the backend's connection.
func TestCancelWhileWaiting(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	closed := make(chan struct{})
	be := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		close(arrived)
		_, _ = br.ReadByte()
		close(closed)
	})
	tr := newTransport(t, Options{Address: be.addr()})
	ctx, cancel := context.WithCancel(context.Background())
	req := mustRequest(t, http.MethodGet, "http://x/", nil).WithContext(ctx)
	errc := make(chan error, 1)
	go func() {
		_, _, err := do(t, tr, req)
		errc <- err
	}()
	<-arrived
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the exchange went on after its context ended")
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the backend's connection stayed open")
	}
}

// Tests that a 101 to an upgrade request hands over the connection as an io.ReadWriteCloser
// (bytes the backend sent after the head included), and that a 101 to any other request is
// refused.
func TestUpgrade(t *testing.T) {
	t.Parallel()
	be := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		r, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nhi")
		if r.Header.Get("Upgrade") == "" {
			return
		}
		_, _ = io.Copy(c, br) // echo
	})
	tr := newTransport(t, Options{Address: be.addr()})
	req := mustRequest(t, http.MethodGet, "http://x/", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if resp.StatusCode != 101 || !ok {
		t.Fatalf("status %d, body %T", resp.StatusCode, resp.Body)
	}
	if _, err := io.WriteString(rwc, "ping"); err != nil {
		t.Fatal(err)
	}
	_ = rwc.(interface{ CloseWrite() error }).CloseWrite()
	b, _ := io.ReadAll(rwc)
	_ = rwc.Close()
	if string(b) != "hiping" {
		t.Errorf("tunnel read %q, want hiping", b)
	}
	if _, _, err := get(t, tr, be.addr(), "/"); !errors.Is(err, ErrUnexpectedSwitch) {
		t.Errorf("a 101 to a plain request: %v, want ErrUnexpectedSwitch", err)
	}
}

// Tests that the pool keeps at most MaxIdleConns idle connections and closes those idle longer
// than IdleTimeout.
func TestPoolBounds(t *testing.T) {
	t.Parallel()
	var open atomic.Int32
	release := make(chan struct{})
	be := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		open.Add(1)
		defer open.Add(-1)
		for {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			<-release
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
		}
	})
	tr := newTransport(t, Options{Address: be.addr(), MaxIdleConns: 2, IdleTimeout: 200 * time.Millisecond})
	errc := make(chan error, 4)
	for range 4 {
		go func() {
			_, _, err := get(t, tr, be.addr(), "/")
			errc <- err
		}()
	}
	if !eventually(t, 5*time.Second, func() bool { return be.accepted.Load() == 4 }) {
		t.Fatal("four concurrent requests did not open four connections")
	}
	close(release)
	for range 4 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if n := tr.IdleConns(); n != 2 {
		t.Errorf("%d idle connections, want MaxIdleConns 2", n)
	}
	if !eventually(t, 5*time.Second, func() bool { return tr.IdleConns() == 0 && open.Load() == 0 }) {
		t.Errorf("%d idle, %d open at the backend, after the idle timeout", tr.IdleConns(), open.Load())
	}
}

// Tests that a response head longer than the read buffer is read whole up to MaxHeaderBytes,
// and refused beyond.
func TestLongResponseHead(t *testing.T) {
	t.Parallel()
	field := "X-Long: " + strings.Repeat("v", 3000) + "\r\n"
	be := newRawBackend(t, serveEach(func(r *http.Request) string {
		n := 3
		if r.URL.Path == "/over" {
			n = 10
		}
		return "HTTP/1.1 200 OK\r\n" + strings.Repeat(field, n) + "Content-Length: 2\r\n\r\nok"
	}))
	tr := newTransport(t, Options{Address: be.addr(), BufferSize: 4096, MaxHeaderBytes: 16 << 10})
	if _, body, err := get(t, tr, be.addr(), "/fits"); err != nil || body != "ok" {
		t.Errorf("a 9 KiB head: %q %v", body, err)
	}
	_, _, err := get(t, tr, be.addr(), "/over")
	var e *http1.Error
	if !errors.As(err, &e) || e.Reason != http1.ReasonRespTooLarge {
		t.Errorf("a 30 KiB head: %v, want %s", err, http1.ReasonRespTooLarge)
	}
}

// Tests the one retry net/http's Transport makes too: a backend that closes a reused
// connection on reading the next request, before any byte of an answer, gets an idempotent
// request without a body again on a new connection (GetConn is called for it, where a caller
// may refuse), and a POST not at all.
func TestRequestOnAConnectionClosedBeforeAnswering(t *testing.T) {
	t.Parallel()
	be := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		for served := 0; ; served++ {
			r, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, r.Body)
			if served == 1 {
				return // closes without answering the second request
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
	var getConns atomic.Int32
	req := mustRequest(t, http.MethodGet, "http://x/", nil)
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GetConn: func(string) { getConns.Add(1) }}))
	if code, body, err := do(t, tr, req); err != nil || code != 200 || body != "ok" {
		t.Fatalf("the GET on a connection closed before answering: %d %q %v", code, body, err)
	}
	if n := getConns.Load(); n != 2 {
		t.Errorf("GetConn called %d times, want 2", n)
	}
	post := mustRequest(t, http.MethodPost, "http://x/", io.NopCloser(strings.NewReader("body")))
	post.ContentLength = 4
	if _, _, err := do(t, tr, post); !errors.Is(err, ErrClosedBeforeAnswer) {
		t.Errorf("the POST: %v, want ErrClosedBeforeAnswer and no second attempt", err)
	}
	if n := be.accepted.Load(); n != 2 {
		t.Errorf("%d connections, want 2 (the POST is not sent again)", n)
	}
}
