package dataplane_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/listener"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// wsBackend accepts a WebSocket upgrade and then echoes every byte back.
func wsBackend(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			http.Error(w, "upgrade required", http.StatusUpgradeRequired)
			return
		}
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer func() { _ = conn.Close() }()
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nX-Path: " + r.URL.Path + "\r\n\r\n")
		_ = rw.Flush()
		_, _ = io.Copy(conn, rw)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// Tests that a WebSocket upgrade is tunnelled: the backend's 101 reaches the client and bytes
// then flow both ways, for longer than the downstream read timeout.
func TestWebSocketUpgrade(t *testing.T) {
	t.Parallel()
	ws := wsBackend(t)
	d := start(t, dataplane.Options{Listener: listener.Options{HeaderReadTimeout: 100 * time.Millisecond, IdleTimeout: time.Second}})
	apply(t, d, snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "", snaptest.Route("ns/ws/0/0", "", snaptest.Prefix("/"), "ns/ws:80"))),
		snaptest.Cluster(t, "ns/ws:80", hostPort(ws)))
	conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(context.Background(), "tcp", addr(t, d, 80))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = io.WriteString(conn, "GET /chat HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }() // a 101 has no body; the tunnel is read through br
	if resp.StatusCode != 101 || resp.Header.Get("X-Path") != "/chat" {
		t.Fatalf("got %d %v", resp.StatusCode, resp.Header)
	}
	for i, msg := range []string{"ping", "pong and more", "still there"} {
		if i > 0 {
			time.Sleep(300 * time.Millisecond) // past the read timeout
		}
		if _, err := io.WriteString(conn, msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != msg {
			t.Fatalf("echo %q: %v", got, err)
		}
	}
}

// Tests that the main response does not wait for a slow mirror, and that the mirror still
// receives its copy.
func TestMirrorDoesNotDelay(t *testing.T) {
	t.Parallel()
	app, _ := backend(t, "app")
	var mirrored atomic.Int64
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		mirrored.Add(1)
		<-release
	}))
	t.Cleanup(slow.Close)
	r := snaptest.Route("ns/m/0/0", "", snaptest.Prefix("/"), "ns/app:80")
	r.Filters = []*discoveryv1.Filter{filter(&discoveryv1.Filter_Mirror{Mirror: &discoveryv1.Mirror{Cluster: "ns/slow:80", Numerator: 1, Denominator: 1}})}
	d := start(t, dataplane.Options{})
	t.Cleanup(func() { close(release) }) // before the data plane's shutdown, which waits for mirrors
	apply(t, d, snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "", r)),
		snaptest.Cluster(t, "ns/app:80", hostPort(app)), snaptest.Cluster(t, "ns/slow:80", hostPort(slow)))
	c := client(addr(t, d, 80))
	begin := time.Now()
	for range 3 {
		if got := do(t, c, "GET", "http://x/"); got.status != 200 {
			t.Fatalf("got %d", got.status)
		}
	}
	if took := time.Since(begin); took > time.Second {
		t.Errorf("three requests took %s with a mirror that never answers", took)
	}
	eventually(t, "the mirror got its copies", func() bool { return mirrored.Load() == 3 })
}
