package h1client

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// rawBackend is a backend over a loopback socket that answers with what its handler writes.
type rawBackend struct {
	ln       net.Listener
	accepted atomic.Int32
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

// newRawBackend serves every connection with handle until the test ends.
func newRawBackend(t *testing.T, handle func(c net.Conn, br *bufio.Reader)) *rawBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &rawBackend{ln: ln}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.accepted.Add(1)
			b.mu.Lock()
			b.conns = append(b.conns, c)
			b.mu.Unlock()
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				defer func() { _ = c.Close() }()
				handle(c, bufio.NewReader(c))
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		b.mu.Lock()
		for _, c := range b.conns {
			_ = c.Close()
		}
		b.mu.Unlock()
		b.wg.Wait()
	})
	return b
}

func (b *rawBackend) addr() string { return b.ln.Addr().String() }

// serveEach answers every request on a connection with the bytes resp returns for it.
func serveEach(resp func(r *http.Request) string) func(net.Conn, *bufio.Reader) {
	return func(c net.Conn, br *bufio.Reader) {
		for {
			r, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, r.Body)
			if _, err := io.WriteString(c, resp(r)); err != nil {
				return
			}
		}
	}
}

// newTransport returns a transport to addr whose idle connections close with the test. Its
// connections are reused at once unless o sets a quarantine: the tests of the quarantine
// set one.
func newTransport(t *testing.T, o Options) *Transport {
	t.Helper()
	if o.ReuseQuarantine == 0 {
		o.ReuseQuarantine = -1
	}
	tr := New(o)
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// get sends a GET for path and returns the response's status and body, or the error.
func get(t *testing.T, tr http.RoundTripper, addr, path string) (int, string, error) {
	t.Helper()
	return do(t, tr, mustRequest(t, http.MethodGet, "http://"+addr+path, nil))
}

func mustRequest(t *testing.T, method, url string, body io.Reader) *http.Request {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	r, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	r.Header["User-Agent"] = nil
	return r
}

// do runs req and reads its body whole.
func do(t *testing.T, tr http.RoundTripper, req *http.Request) (int, string, error) {
	t.Helper()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// eventually polls cond until it holds or d passes.
func eventually(t *testing.T, d time.Duration, cond func() bool) bool {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if cond() {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return cond()
}

// blockingReader is a request body that returns first, then blocks until release closes.
type blockingReader struct {
	first   string
	release chan struct{}
	sent    bool
}

func (r *blockingReader) Read(p []byte) (int, error) {
	if !r.sent {
		r.sent = true
		return copy(p, r.first), nil
	}
	<-r.release
	return 0, io.ErrUnexpectedEOF
}

func (r *blockingReader) Close() error { return nil }

func repeat(s string, n int) string { return strings.Repeat(s, n) }
