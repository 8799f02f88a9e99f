package h1server

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/goleak"

	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testServer is a Server on a loopback listener, with the server side of every connection it
// accepted.
type testServer struct {
	*Server
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

// serve starts a Server with h on a loopback port; the test's end closes it and waits for
// its connections.
func serve(t testing.TB, h http.Handler, opts Options) *testServer {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: New(h, opts), ln: ln}
	ts.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			ts.mu.Lock()
			ts.conns = append(ts.conns, c)
			ts.mu.Unlock()
			ts.wg.Go(func() { _ = ts.ServeConn(c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		ts.Close()
		ts.wg.Wait()
	})
	return ts
}

// dial opens a client connection, closed at the test's end.
func (ts *testServer) dial(t testing.TB) net.Conn { return dialAddr(t, ts.ln.Addr().String()) }

// dialAddr opens a client connection to addr, closed at the test's end.
func dialAddr(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// serverConn returns the server side of the n-th connection accepted, waiting for it.
func (ts *testServer) serverConn(t *testing.T, n int) net.Conn {
	t.Helper()
	var c net.Conn
	poll(t, "connection accepted", func() bool {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		if len(ts.conns) > n {
			c = ts.conns[n]
			return true
		}
		return false
	})
	return c
}

// drained waits until the server read every byte the client sent on c (its receive queue is
// empty), so that what the client writes next arrives in another read.
func drained(t *testing.T, c net.Conn) {
	t.Helper()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	poll(t, "server read the bytes sent", func() bool {
		var n int32
		_ = raw.Control(func(fd uintptr) {
			_, _, _ = syscall.Syscall(syscall.SYS_IOCTL, fd, 0x541B /* FIONREAD */, uintptr(unsafe.Pointer(&n)))
		})
		return n == 0
	})
}

// poll waits until cond holds, failing the test after 5 seconds.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func write(t testing.TB, c net.Conn, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatal(err)
	}
}

// reply is a response read whole.
type reply struct {
	StatusCode       int
	Proto            string
	Header, Trailer  http.Header
	ContentLength    int64
	TransferEncoding []string
	Close            bool
}

// readResponse reads one response to a request of method from br, its body whole.
func readResponse(t testing.TB, br *bufio.Reader, method string) (reply, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read response body: %v", err)
	}
	return reply{
		StatusCode: resp.StatusCode, Proto: resp.Proto, Header: resp.Header, Trailer: resp.Trailer,
		ContentLength: resp.ContentLength, TransferEncoding: resp.TransferEncoding, Close: resp.Close,
	}, string(b)
}

// expectEOF checks that the server closes c without sending anything more.
func expectEOF(t *testing.T, br *bufio.Reader) {
	t.Helper()
	b, err := br.ReadByte()
	if err == nil {
		rest, _ := br.Peek(br.Buffered())
		t.Fatalf("got %q after the response, want the connection closed", append([]byte{b}, rest...))
	}
}

// recorded is what a handler saw of a request.
type recorded struct {
	Method, URL, Host, RequestURI, Proto string
	ProtoMinor                           int
	Header, Trailer                      http.Header
	ContentLength                        int64
	TransferEncoding                     []string
	Close                                bool
	Body                                 string
	BodyErr                              string
}

// recorder answers 200 with the request's body and sends what it saw on the channel.
func recorder(got chan<- recorded) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		rec := recorded{
			Method: r.Method, URL: r.URL.String(), Host: r.Host, RequestURI: r.RequestURI, Proto: r.Proto,
			ProtoMinor: r.ProtoMinor, Header: r.Header, Trailer: r.Trailer, ContentLength: r.ContentLength,
			TransferEncoding: r.TransferEncoding, Close: r.Close, Body: string(b),
		}
		if err != nil {
			rec.BodyErr = err.Error()
		}
		got <- rec
		_, _ = w.Write(b)
	})
}

func clientWatch(r *http.Request) http1.ClientWatch { return http1.ClientWatchOf(r.Context()) }
