package h1server

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// Tests that a read of a request body that the server ends while the read waits for its lock
// reads nothing: the connection's buffered bytes (here the rest of the body) may be back in
// the pool by then, another connection's. A pump still reading after its exchange ended does
// exactly that.
func TestBodyEndedBeforeTheReadsLockReadsNothing(t *testing.T) {
	client, server := net.Pipe()
	defer func() { _ = client.Close(); _ = server.Close() }()
	c := &conn{rw: server, br: bufio.NewReader(strings.NewReader("buffered body bytes"))}
	b := &body{c: c, remain: 19}
	testHookBeforeLock = func() {
		testHookBeforeLock = nil
		b.end() // the handler returned: the server ends the body
	}
	defer func() { testHookBeforeLock = nil }()
	buf := make([]byte, 64)
	n, err := b.Read(buf)
	if n != 0 || !errors.Is(err, http.ErrBodyReadAfterClose) {
		t.Fatalf("read after end got %d bytes %q, %v; want none and %v", n, buf[:n], err, http.ErrBodyReadAfterClose)
	}
}

// Tests that a body a handler's goroutine still reads after the handler returned, as a
// transport's RoundTrip may, is ended on every way a handler's exchange ends without its
// response completing (the client gone, a panic, a hijack): the read gets
// http.ErrBodyReadAfterClose instead of reading the connection's read buffer, which is back in
// the pool and may be another connection's.
func TestBodyReadAfterTheHandlerReturned(t *testing.T) {
	for _, tc := range []struct {
		name string
		// handle ends the handler's exchange in its own way.
		handle func(t *testing.T, w http.ResponseWriter, r *http.Request)
		client func(t *testing.T, c net.Conn)
	}{{
		name: "client gone",
		handle: func(t *testing.T, _ http.ResponseWriter, r *http.Request) {
			poll(t, "the client goes away", func() bool { return clientWatch(r).ClientGone() })
		},
		client: func(t *testing.T, c net.Conn) { _ = c.Close() },
	}, {
		name:   "handler aborted",
		handle: func(*testing.T, http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) },
	}, {
		name: "hijacked",
		handle: func(t *testing.T, w http.ResponseWriter, _ *http.Request) {
			c, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			_ = c.Close()
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			read := make(chan error, 1)
			returned := make(chan struct{})
			var srv atomic.Pointer[Server]
			ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				go func() {
					<-returned
					// Wait until the connection ended and gave its buffer back.
					poll(t, "the connection ends", func() bool { return srv.Load().Open() == 0 })
					_, err := r.Body.Read(make([]byte, 64))
					read <- err
				}()
				defer close(returned)
				tc.handle(t, w, r)
			}), Options{})
			srv.Store(ts.Server)
			c := ts.dial(t)
			write(t, c, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\nfirst bytes")
			if tc.client != nil {
				drained(t, ts.serverConn(t, 0))
				tc.client(t, c)
			}
			if err := <-read; !errors.Is(err, http.ErrBodyReadAfterClose) {
				t.Fatalf("a read after the handler returned: %v, want %v", err, http.ErrBodyReadAfterClose)
			}
		})
	}
}
