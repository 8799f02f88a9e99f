package dataplane_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// rawBackend is an HTTP/1.1 backend written on raw sockets, so that tests control every byte
// it answers and see every byte it receives. serve gets each connection's reader and the
// connection, and runs until it returns.
type rawBackend struct {
	ln    net.Listener
	conns atomic.Int64
	mu    sync.Mutex
	// received holds every request head the backend parsed, in order.
	received []*http.Request
}

func newRawBackend(t *testing.T, serve func(b *rawBackend, br *bufio.Reader, c net.Conn)) *rawBackend {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &rawBackend{ln: ln}
	var wg sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.conns.Add(1)
			wg.Go(func() {
				defer func() { _ = c.Close() }()
				serve(b, bufio.NewReader(c), c)
			})
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	return b
}

func (b *rawBackend) addr() string { return b.ln.Addr().String() }

// read parses one request head from br, records it, and returns it; its body is left unread.
func (b *rawBackend) read(br *bufio.Reader) (*http.Request, error) {
	r, err := http.ReadRequest(br)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.received = append(b.received, r)
	b.mu.Unlock()
	return r, nil
}

func (b *rawBackend) requests() []*http.Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*http.Request(nil), b.received...)
}

// routeAll applies a table whose one route on port 80 sends everything to the backend at
// addr, with the given filters, and returns the proxy's address.
func routeAll(t *testing.T, d *dataplane.DataPlane, backendAddr string, mutate ...func(*discoveryv1.Route)) string {
	t.Helper()
	r := snaptest.Route("ns/r/0/0", "", snaptest.Prefix("/"), "ns/app:80")
	for _, m := range mutate {
		m(r)
	}
	apply(t, d, snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "", r)), snaptest.Cluster(t, "ns/app:80", backendAddr))
	return addr(t, d, 80)
}

// rawConn dials the proxy and returns the connection and a reader of its answers.
func rawConn(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

// rawResponse is what roundTrip read of a response.
type rawResponse struct {
	StatusCode int
	Header     http.Header
	// Close says the proxy announced it closes the connection.
	Close bool
}

// roundTrip writes raw request bytes and reads one response, whose body it returns whole.
func roundTrip(t *testing.T, c net.Conn, br *bufio.Reader, raw string) (rawResponse, string) {
	t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read response to %q: %v", firstLine(raw), err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatalf("read body of response to %q: %v", firstLine(raw), err)
	}
	return rawResponse{StatusCode: resp.StatusCode, Header: resp.Header, Close: resp.Close}, string(body)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\r\n")
	return line
}

// closedByPeer says whether the proxy closes c within bound, reading and dropping anything
// it still sends.
func closedByPeer(c net.Conn, bound time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(bound))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return err == nil || !errors.As(err, &ne) || !ne.Timeout()
}

func decodeEcho(t *testing.T, body string, e *echo) {
	t.Helper()
	if err := json.Unmarshal([]byte(body), e); err != nil {
		t.Fatalf("backend answer %q: %v", body, err)
	}
}
