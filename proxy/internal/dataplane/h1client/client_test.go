package h1client

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync/atomic"
	"testing"
)

// echoServer answers with the method, the body's length and the body, and counts connections.
func echoServer(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		for k, vs := range r.Trailer {
			w.Header()["Echo-Trailer-"+k] = vs
		}
		w.Header().Set("Echo-Te", strings.Join(r.TransferEncoding, ","))
		if r.URL.Path == "/chunked" {
			w.Header().Set("Trailer", "X-Sum")
			_, _ = w.Write(b)
			w.(http.Flusher).Flush()
			w.Header().Set("X-Sum", fmt.Sprint(len(b)))
			return
		}
		_, _ = fmt.Fprintf(w, "%s %d %s", r.Method, len(b), b)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

// Tests that exchanges of every framing work against net/http's server and reuse one
// connection: no body, a small body (one writev), a large one (the pump), a chunked one with
// trailers, HEAD (after which the connection is closed), and a chunked response with
// trailers.
func TestRoundTripAgainstNetHTTP(t *testing.T) {
	t.Parallel()
	srv, conns := echoServer(t)
	addr := srv.Listener.Addr().String()
	tr := newTransport(t, Options{Address: addr})
	if code, body, err := get(t, tr, addr, "/"); err != nil || code != 200 || body != "GET 0 " {
		t.Fatalf("GET: %d %q %v", code, body, err)
	}
	small := repeat("s", 1000)
	if _, body, err := do(t, tr, mustRequest(t, http.MethodPost, "http://"+addr+"/", strings.NewReader(small))); err != nil || body != "POST 1000 "+small {
		t.Fatalf("small POST: %q %v", body, err)
	}
	large := repeat("L", 300<<10)
	if _, body, err := do(t, tr, mustRequest(t, http.MethodPut, "http://"+addr+"/", strings.NewReader(large))); err != nil || body != "PUT 307200 "+large {
		t.Fatalf("large PUT: %d bytes, %v", len(body), err)
	}
	req := mustRequest(t, http.MethodPost, "http://"+addr+"/", io.NopCloser(strings.NewReader("chunky")))
	req.ContentLength = -1
	req.Trailer = http.Header{"X-T": nil}
	resp, err := tr.RoundTrip(req)
	req.Trailer.Set("X-T", "after")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if string(b) != "POST 6 chunky" || resp.Header.Get("Echo-Te") != "chunked" {
		t.Errorf("chunked POST: %q, TE %q", b, resp.Header.Get("Echo-Te"))
	}
	head := mustRequest(t, http.MethodHead, "http://"+addr+"/", nil)
	if code, body, err := do(t, tr, head); err != nil || code != 200 || body != "" {
		t.Errorf("HEAD: %d %q %v", code, body, err)
	}
	req = mustRequest(t, http.MethodPost, "http://"+addr+"/chunked", strings.NewReader("abc"))
	resp, err = tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := resp.Trailer["X-Sum"]; !ok {
		t.Errorf("trailer not announced before the body: %v", resp.Trailer)
	}
	b, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if string(b) != "abc" || resp.Trailer.Get("X-Sum") != "3" {
		t.Errorf("chunked response: %q, trailer %v", b, resp.Trailer)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections for sequential exchanges, want 2 (one until the HEAD, one after)", n)
	}
}

// Tests that the trailers of a chunked request reach the backend (sent after the body).
func TestRequestTrailersReachTheBackend(t *testing.T) {
	t.Parallel()
	srv, _ := echoServer(t)
	addr := srv.Listener.Addr().String()
	tr := newTransport(t, Options{Address: addr})
	pr, pw := io.Pipe()
	req := mustRequest(t, http.MethodPost, "http://"+addr+"/", pr)
	req.ContentLength = -1
	req.Trailer = http.Header{"X-T": nil}
	go func() {
		_, _ = pw.Write([]byte("part"))
		req.Trailer.Set("X-T", "late")
		_ = pw.Close()
	}()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "POST 4 part" || resp.Header.Get("Echo-Trailer-X-T") != "late" {
		t.Errorf("got %q, trailer echo %q", b, resp.Header.Get("Echo-Trailer-X-T"))
	}
}

// Tests that the trace hooks forward relies on are called: GetConn, WroteHeaders, and
// Got1xxResponse for a 103 but not for a 100.
func TestTraceHooks(t *testing.T) {
	t.Parallel()
	be := newRawBackend(t, serveEach(func(*http.Request) string {
		return "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	}))
	tr := newTransport(t, Options{Address: be.addr()})
	var got []string
	req := mustRequest(t, http.MethodGet, "http://x/", nil)
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GetConn:      func(string) { got = append(got, "get") },
		WroteHeaders: func() { got = append(got, "wrote") },
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			got = append(got, fmt.Sprintf("%d %s", code, h.Get("Link")))
			return nil
		},
	}))
	if code, body, err := do(t, tr, req); err != nil || code != 200 || body != "ok" {
		t.Fatalf("%d %q %v", code, body, err)
	}
	if want := "get,wrote,103 </a>"; strings.Join(got, ",") != want {
		t.Errorf("hooks %q, want %q", strings.Join(got, ","), want)
	}
}

// Tests that the request bytes have one Host, one framing field at most, no hop-by-hop field,
// and the end-to-end fields sorted by name.
func TestRequestBytes(t *testing.T) {
	t.Parallel()
	heads := make(chan string, 1)
	be := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		var head bytes.Buffer
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			head.WriteString(line)
			if line == "\r\n" {
				break
			}
		}
		heads <- head.String()
		_, _ = io.CopyN(io.Discard, br, 4)
		_, _ = io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
	})
	tr := newTransport(t, Options{Address: be.addr()})
	req := mustRequest(t, http.MethodPost, "http://ignored/a?b=c", strings.NewReader("body"))
	req.Host = "example.com"
	req.Header = http.Header{
		"Zed": {"2"}, "Alpha": {"1", " spaced "}, "Connection": {"keep-alive, X-Drop"}, "X-Drop": {"x"},
		"Keep-Alive": {"timeout=5"}, "Transfer-Encoding": {"chunked"}, "Content-Length": {"99"},
		"Host": {"evil"}, "Te": {"trailers, deflate"}, "Proxy-Connection": {"keep-alive"}, "User-Agent": nil,
	}
	if code, _, err := do(t, tr, req); err != nil || code != 204 {
		t.Fatalf("%d %v", code, err)
	}
	want := "POST /a?b=c HTTP/1.1\r\nHost: example.com\r\nAlpha: 1\r\nAlpha: spaced\r\nZed: 2\r\nTE: trailers\r\nContent-Length: 4\r\n\r\n"
	if got := <-heads; got != want {
		t.Errorf("head\n%q\nwant\n%q", got, want)
	}
}

// Tests that a request the transport cannot write faithfully is refused before any byte
// leaves: a field value with a line break, a field name that is no token, a bad Host.
func TestInvalidRequestsAreRefused(t *testing.T) {
	t.Parallel()
	be := newRawBackend(t, serveEach(func(*http.Request) string { return "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n" }))
	tr := newTransport(t, Options{Address: be.addr()})
	for name, mutate := range map[string]func(r *http.Request){
		"a value with CRLF":       func(r *http.Request) { r.Header["X"] = []string{"a\r\nInjected: 1"} },
		"a name that is no token": func(r *http.Request) { r.Header["X Y"] = []string{"1"} },
		"a Host with a space":     func(r *http.Request) { r.Host = "a b" },
		"a method with a space":   func(r *http.Request) { r.Method = "GET /x" },
	} {
		req := mustRequest(t, http.MethodGet, "http://x/", nil)
		mutate(req)
		if resp, err := tr.RoundTrip(req); err == nil {
			_ = resp.Body.Close()
			t.Errorf("%s: sent", name)
		}
	}
	if n := be.accepted.Load(); n > 1 {
		t.Errorf("%d connections for refused requests", n)
	}
}

// Tests that a failed connect is the dialer's *net.OpError with Op "dial", which forward
// classifies as a connect failure.
func TestDialErrorClass(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	tr := newTransport(t, Options{Address: addr})
	_, _, err = get(t, tr, addr, "/")
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		t.Fatalf("error %v (%T), want a dial *net.OpError", err, err)
	}
}

// Tests that a connection the backend closed while idle is not used for the next request.
func TestStaleIdleConnectionIsNotUsed(t *testing.T) {
	t.Parallel()
	closed := make(chan struct{}, 3)
	be := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		_ = c.Close() // keep-alive notwithstanding
		closed <- struct{}{}
	})
	tr := newTransport(t, Options{Address: be.addr()})
	for i := range 3 {
		if _, body, err := get(t, tr, be.addr(), "/"); err != nil || body != "ok" {
			t.Fatalf("request %d: %q %v", i, body, err)
		}
		<-closed
	}
	if n := be.accepted.Load(); n != 3 {
		t.Errorf("%d connections, want 3", n)
	}
}

// Tests that a response reads as net/http's ReadResponse reads it: status text, version,
// fields in order with duplicates, length, coding, close and announced trailers, for heads
// shorter and longer than the read buffer.
func TestResponseMatchesNetHTTP(t *testing.T) {
	t.Parallel()
	long := "X-Long: " + strings.Repeat("l", 5000) + "\r\n"
	raws := []string{
		"HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nset-cookie: b=2\r\nX-Empty:\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 404\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.0 200 Fine\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-A, x-b\r\n\r\n0\r\nX-A: 1\r\n\r\n",
		"HTTP/1.1 200 OK\r\n" + long + "A: 1\r\nA: 2\r\nContent-Length: 0\r\n\r\n",
	}
	for i, raw := range raws {
		be := newRawBackend(t, serveEach(func(*http.Request) string { return raw }))
		tr := newTransport(t, Options{Address: be.addr(), BufferSize: 4096})
		ours, err := tr.RoundTrip(mustRequest(t, http.MethodGet, "http://x/", nil))
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		_, _ = io.ReadAll(ours.Body)
		_ = ours.Body.Close()
		theirs, err := http.ReadResponse(bufio.NewReader(strings.NewReader(raw)), &http.Request{Method: http.MethodGet})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(theirs.Body)
		_ = theirs.Body.Close()
		got := fmt.Sprintf("%q %q %d %v %d %v %v %v", ours.Status, ours.Proto, ours.ProtoMinor, ours.Header, ours.ContentLength, ours.TransferEncoding, ours.Close, ours.Trailer)
		want := fmt.Sprintf("%q %q %d %v %d %v %v %v", theirs.Status, theirs.Proto, theirs.ProtoMinor, theirs.Header, theirs.ContentLength, theirs.TransferEncoding, theirs.Close, theirs.Trailer)
		if got != want {
			t.Errorf("response %d:\n got %s\nwant %s", i, got, want)
		}
	}
}
