package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// The drain tests run the process main runs (process.run, whose context SIGTERM ends) with a
// routing table applied to its data plane, against its real listeners: raw HTTP/1.1 over
// plaintext TCP, raw HTTP/2 frames over TLS (ALPN h2), on both HTTP/1.1 engines.

// Sizes of the backend's slow download: drainChunks chunks of drainChunk bytes, one every
// drainEvery.
const (
	drainChunk  = 1024
	drainChunks = 20
	drainEvery  = 75 * time.Millisecond
	drainHost   = "drain.test"
)

// Tests the drain on SIGTERM: during the drain period /readyz fails while /healthz passes and
// a new connection is served as before; after it, a keep-alive connection's response in flight
// says Connection: close and the connection closes, an idle one is closed, an HTTP/2 client
// gets GOAWAY and its stream in flight completes with all its bytes, a slow download started
// before SIGTERM completes, a WebSocket tunnel still carries bytes, the listeners refuse
// connections, and run returns as soon as the connections are done, well before the shutdown
// timeout, having cut none.
func TestDrainServesThroughTheDrainPeriodThenClosesGracefully(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{"native", "nethttp"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			const drainPeriod, timeout = 700 * time.Millisecond, 8 * time.Second
			px := startDrainProxy(t, "--http1-engine="+engine, "--drain-period="+drainPeriod.String(), "--shutdown-timeout="+timeout.String())

			idle := dialH1(t, px.plain)
			mustGet(t, idle, "/ok", false)
			keep := dialH1(t, px.plain)
			mustGet(t, keep, "/ok", false)
			download := dialH1(t, px.plain)
			downloaded := download.startGet("/slow")
			stream := dialH2(t, px.tls)
			if err := stream.get(1, "/slow"); err != nil {
				t.Fatal(err)
			}
			streamed := stream.startRead(1)
			tunnel := dialH1(t, px.plain)
			tunnel.upgrade(t)
			<-downloaded.head
			<-streamed.head

			sigterm := time.Now()
			px.stop()
			idleClosed := idle.startAwaitClose()
			if code, body := get(t, px.health+"/readyz"); code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "Draining: shutting down; Ready: ") {
				t.Errorf("/readyz while draining = %d %q", code, body)
			}
			if code, body := get(t, px.health+"/healthz"); code != http.StatusOK || body != "ok" {
				t.Errorf("/healthz while draining = %d %q", code, body)
			}
			mustGet(t, dialH1(t, px.plain), "/ok", false)
			// Sent within the drain period, answered after it.
			late := keep.startGet("/sleep?d=" + (drainPeriod + 300*time.Millisecond).String())
			if in := time.Since(sigterm); in >= drainPeriod {
				t.Fatalf("the checks of the drain period took %s, longer than it", in)
			}
			if code := px.gauge(t, "coxswain_proxy_draining"); code != 1 {
				t.Errorf("coxswain_proxy_draining = %v while draining", code)
			}

			r := <-late.done
			if r.err != nil || r.status != http.StatusOK || !r.close {
				t.Errorf("the keep-alive response in flight at the drain: %+v, want 200 with Connection: close", r)
			}
			if err := keep.awaitClose(2 * time.Second); err != nil {
				t.Errorf("the keep-alive connection after Connection: close: %v", err)
			}
			if at := <-idleClosed; at.err != nil || at.after(sigterm) < drainPeriod || at.after(sigterm) > drainPeriod+2*time.Second {
				t.Errorf("the idle connection closed %s after SIGTERM (%v), want just after the %s drain period", at.after(sigterm), at.err, drainPeriod)
			}
			s := <-streamed.done
			if s.err != nil || s.status != http.StatusOK || len(s.body) != drainChunk*drainChunks || !s.ended {
				t.Errorf("the HTTP/2 stream in flight: status %d, %d of %d bytes, ended %v, %v", s.status, len(s.body), drainChunk*drainChunks, s.ended, s.err)
			}
			if s.goAway.IsZero() || s.goAway.Sub(sigterm) < drainPeriod || s.goAwayCode != http2.ErrCodeNo || !s.goAwayBeforeEnd {
				t.Errorf("GOAWAY %s after SIGTERM, code %v, before the stream's end %v: want a graceful GOAWAY after the drain period, during the stream",
					s.goAway.Sub(sigterm), s.goAwayCode, s.goAwayBeforeEnd)
			}
			_ = stream.c.Close()
			if err := tunnel.echo("after the drain period"); err != nil {
				t.Errorf("the WebSocket tunnel open at SIGTERM, after the listeners closed: %v", err)
			}
			_ = tunnel.c.Close()
			d := <-downloaded.done
			if d.err != nil || d.status != http.StatusOK || len(d.body) != drainChunk*drainChunks {
				t.Errorf("the slow download started before SIGTERM: status %d, %d of %d bytes, %v", d.status, len(d.body), drainChunk*drainChunks, d.err)
			}
			_ = download.c.Close()
			lastDone := time.Now()

			if err := px.wait(timeout); err != nil {
				t.Fatal(err)
			}
			if after := time.Since(lastDone); after > 2*time.Second {
				t.Errorf("run returned %s after the last connection was done", after)
			}
			if took := time.Since(sigterm); took > drainPeriod+timeout/2 {
				t.Errorf("run returned %s after SIGTERM, with every connection done long before the %s timeout", took, timeout)
			}
			if c, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", px.plain); err == nil {
				_ = c.Close()
				t.Error("a connection was accepted after the drain")
			}
			if cut := px.gauge(t, "coxswain_proxy_shutdown_cut_connections_total"); cut != 0 {
				t.Errorf("%v connections cut, want none", cut)
			}
		})
	}
}

// Tests that connections that never finish (a download that never ends, over HTTP/1.1 and
// over HTTP/2) are cut at the shutdown timeout, counted, and that run returns then; and that
// a zero drain period closes the listeners at once.
func TestDrainCutsWhatTheTimeoutLeaves(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{"native", "nethttp"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			const timeout = 700 * time.Millisecond
			px := startDrainProxy(t, "--http1-engine="+engine, "--drain-period=0", "--shutdown-timeout="+timeout.String())
			download := dialH1(t, px.plain)
			downloaded := download.startGet("/forever")
			stream := dialH2(t, px.tls)
			if err := stream.get(1, "/forever"); err != nil {
				t.Fatal(err)
			}
			streamed := stream.startRead(1)
			<-downloaded.head
			<-streamed.head

			sigterm := time.Now()
			px.stop()
			refused := false
			for !refused && time.Since(sigterm) < timeout {
				c, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", px.plain)
				if err != nil {
					refused = true
					break
				}
				_ = c.Close()
				time.Sleep(10 * time.Millisecond)
			}
			if !refused {
				t.Errorf("without a drain period, the listener still accepted %s after SIGTERM", timeout)
			}
			if err := px.wait(5 * time.Second); err != nil {
				t.Fatal(err)
			}
			took := time.Since(sigterm)
			if took < timeout || took > timeout+3*time.Second {
				t.Errorf("run returned %s after SIGTERM, want just after the %s timeout", took, timeout)
			}
			if d := <-downloaded.done; d.err == nil {
				t.Errorf("the endless download ended without an error after %d bytes", len(d.body))
			}
			if s := <-streamed.done; s.err == nil && s.ended {
				t.Errorf("the endless HTTP/2 stream ended cleanly after %d bytes", len(s.body))
			}
			if cut := px.gauge(t, "coxswain_proxy_shutdown_cut_connections_total"); cut != 2 {
				t.Errorf("%v connections cut, want the 2 that never finished", cut)
			}
		})
	}
}

// drainProxy is a running process with a table applied: an HTTP port and an HTTPS port, both
// routing everything to a backend of slow and endless downloads.
type drainProxy struct {
	p                  *process
	plain, tls, health string
	stop               context.CancelFunc
	done               chan error
}

func startDrainProxy(t *testing.T, flags ...string) *drainProxy {
	t.Helper()
	// Made first, so that it closes last: its endless downloads end once the proxy stopped.
	backend := drainBackend(t)
	dir := t.TempDir()
	o, err := parseFlags(append([]string{
		"--discovery-endpoint=127.0.0.1:1", "--discovery-server-name=discovery.test", "--node-id=proxy-0",
		"--health-address=127.0.0.1:0", "--listen-host=127.0.0.1", "--access-log=false", "--admin-address=",
		"--token-path=" + filepath.Join(dir, "token"), "--trust-bundle-path=" + filepath.Join(dir, "ca.crt"),
	}, flags...))
	if err != nil {
		t.Fatal(err)
	}
	p, err := newProcess(t.Context(), o, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	px := &drainProxy{p: p, stop: cancel, done: make(chan error, 1), health: "http://" + p.lis.Addr().String()}
	go func() { px.done <- p.run(ctx) }()
	t.Cleanup(func() {
		cancel()
		_ = px.wait(30 * time.Second)
	})

	cert, _ := snaptest.Certificate(t, "ns/cert", drainHost)
	vh := func() *discoveryv1.VirtualHost {
		return snaptest.VHost("all", "", snaptest.Route("ns/all/0/0", "", snaptest.Prefix("/"), "ns/app:80"))
	}
	secure := vh()
	secure.Certificates = []string{"ns/cert"}
	plainPort, tlsPort := freePort(t), freePort(t)
	set := snaptest.Set(t, "v1",
		snaptest.HTTP("ns/gw", plainPort, vh()),
		snaptest.Listener("ns/gw", tlsPort, discoveryv1.Protocol_PROTOCOL_HTTPS, secure), cert,
		snaptest.Cluster(t, "ns/app:80", backend))
	if err := p.plane.Apply(t.Context(), set); err != nil {
		t.Fatal(err)
	}
	px.plain, _ = p.plane.Addr(plainPort)
	px.tls, _ = p.plane.Addr(tlsPort)
	// As the agent reports a snapshot applied on a live stream.
	p.tracker.StreamOpened()
	p.tracker.SnapshotApplied("v1")
	if code, body := get(t, px.health+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz before SIGTERM = %d %q", code, body)
	}
	return px
}

// wait returns run's error, or fails after bound.
func (px *drainProxy) wait(bound time.Duration) error {
	select {
	case err := <-px.done:
		px.done <- err
		return err
	case <-time.After(bound):
		return fmt.Errorf("run did not return within %s of SIGTERM", bound)
	}
}

// gauge returns the value of the metric name without labels, -1 when there is none.
func (px *drainProxy) gauge(t *testing.T, name string) float64 {
	t.Helper()
	return metricValue(t, px.p.reg, name)
}

func metricValue(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name || len(f.GetMetric()) != 1 {
			continue
		}
		m := f.GetMetric()[0]
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	return -1
}

// freePort returns a loopback port free a moment ago.
func freePort(t *testing.T) uint32 {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return uint32(ln.Addr().(*net.TCPAddr).Port) //nolint:gosec // a TCP port
}

// drainBackend serves /ok at once, /sleep?d= after d, /slow as drainChunks chunks of declared
// length over drainChunks*drainEvery, and /forever, chunks until its client goes away.
func drainBackend(t *testing.T) string {
	t.Helper()
	chunk := bytes.Repeat([]byte("x"), drainChunk)
	stream := func(w http.ResponseWriter, r *http.Request, n int) {
		rc := http.NewResponseController(w)
		for i := 0; n < 0 || i < n; i++ {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			_ = rc.Flush()
			select {
			case <-time.After(drainEvery):
			case <-r.Context().Done():
				return
			}
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("/sleep", func(w http.ResponseWriter, r *http.Request) {
		d, _ := time.ParseDuration(r.URL.Query().Get("d"))
		time.Sleep(d)
		_, _ = io.WriteString(w, "slept")
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(drainChunk*drainChunks))
		stream(w, r, drainChunks)
	})
	mux.HandleFunc("/forever", func(w http.ResponseWriter, r *http.Request) { stream(w, r, -1) })
	mux.HandleFunc("/ws", func(w http.ResponseWriter, _ *http.Request) {
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer func() { _ = conn.Close() }()
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		if rw.Flush() == nil {
			_, _ = io.Copy(conn, rw) // echoes until the client closes
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// h1Conn is a raw HTTP/1.1 keep-alive connection.
type h1Conn struct {
	c  net.Conn
	br *bufio.Reader
}

func dialH1(t *testing.T, addr string) *h1Conn {
	t.Helper()
	c, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return &h1Conn{c: c, br: bufio.NewReader(c)}
}

// h1Result is a response read off an h1Conn: close says it carried Connection: close.
type h1Result struct {
	status int
	close  bool
	body   []byte
	err    error
}

// exchange is a request in flight: head closes once its response head came, done gets it.
type exchange[R any] struct {
	head chan struct{}
	done chan R
}

// startGet sends a GET of path and reads its response in the background.
func (h *h1Conn) startGet(path string) exchange[h1Result] {
	x := exchange[h1Result]{head: make(chan struct{}), done: make(chan h1Result, 1)}
	go func() {
		var r h1Result
		defer func() { x.done <- r }()
		defer func() {
			select {
			case <-x.head:
			default:
				close(x.head)
			}
		}()
		if _, r.err = io.WriteString(h.c, "GET "+path+" HTTP/1.1\r\nHost: "+drainHost+"\r\n\r\n"); r.err != nil {
			return
		}
		resp, err := http.ReadResponse(h.br, nil)
		if r.err = err; err != nil {
			return
		}
		close(x.head)
		r.status, r.close = resp.StatusCode, resp.Close
		r.body, r.err = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
	}()
	return x
}

// mustGet GETs path and requires a 200 whose Connection: close is wantClose.
func mustGet(t *testing.T, h *h1Conn, path string, wantClose bool) {
	t.Helper()
	r := <-h.startGet(path).done
	if r.err != nil || r.status != http.StatusOK || r.close != wantClose {
		t.Fatalf("GET %s: %+v, want 200 with Connection: close %v", path, r, wantClose)
	}
}

// upgrade opens a WebSocket tunnel to the backend's echo.
func (h *h1Conn) upgrade(t *testing.T) {
	t.Helper()
	_, err := io.WriteString(h.c, "GET /ws HTTP/1.1\r\nHost: "+drainHost+"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(h.br, nil)
	if err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	_ = resp.Body.Close() // none: the tunnel's bytes follow in h.br
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade answered %s", resp.Status)
	}
	if err := h.echo("before SIGTERM"); err != nil {
		t.Fatal(err)
	}
}

// echo sends msg through the tunnel and requires it back.
func (h *h1Conn) echo(msg string) error {
	if _, err := io.WriteString(h.c, msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(h.br, got); err != nil {
		return fmt.Errorf("echo of %q: %w", msg, err)
	}
	if string(got) != msg {
		return fmt.Errorf("echo of %q: %q", msg, got)
	}
	return nil
}

// closedAt is when a connection was seen closed by the proxy.
type closedAt struct {
	at  time.Time
	err error
}

func (c closedAt) after(t time.Time) time.Duration { return c.at.Sub(t) }

// startAwaitClose waits in the background for the proxy to close the connection.
func (h *h1Conn) startAwaitClose() <-chan closedAt {
	out := make(chan closedAt, 1)
	go func() {
		err := h.awaitClose(10 * time.Second)
		out <- closedAt{at: time.Now(), err: err}
	}()
	return out
}

// awaitClose waits for the connection's end: an error unless the proxy closes it in bound.
func (h *h1Conn) awaitClose(bound time.Duration) error {
	_ = h.c.SetReadDeadline(time.Now().Add(bound))
	n, err := h.br.Read(make([]byte, 1))
	switch {
	case n > 0:
		return errors.New("the proxy sent bytes where it should have closed")
	case errors.Is(err, io.EOF):
		return nil
	default:
		return fmt.Errorf("not closed: %w", err)
	}
}

// h2Conn is a raw HTTP/2 connection over TLS.
type h2Conn struct {
	c  *tls.Conn
	fr *http2.Framer
}

func dialH2(t *testing.T, addr string) *h2Conn {
	t.Helper()
	d := &tls.Dialer{Config: &tls.Config{
		ServerName: drainHost, NextProtos: []string{"h2"},
		InsecureSkipVerify: true, //nolint:gosec // the test's certificate; only the drain matters here
	}}
	nc, err := d.DialContext(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := nc.(*tls.Conn)
	t.Cleanup(func() { _ = c.Close() })
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("negotiated %q, want h2", p)
	}
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	h := &h2Conn{c: c, fr: http2.NewFramer(c, c)}
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := h.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return h
}

// get sends a GET of path on stream id.
func (h *h2Conn) get(id uint32, path string) error {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", drainHost}, {":path", path}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: buf.Bytes(), EndStream: true, EndHeaders: true})
}

// h2Result is what a stream got: its status and body, whether it ended (END_STREAM), and the
// GOAWAY the connection got, when and whether before the stream's end.
type h2Result struct {
	status          int
	body            []byte
	ended           bool
	goAway          time.Time
	goAwayCode      http2.ErrCode
	goAwayBeforeEnd bool
	err             error
}

// startRead reads the connection's frames in the background until stream id ends or the
// connection fails, acknowledging settings and pings.
func (h *h2Conn) startRead(id uint32) exchange[h2Result] {
	x := exchange[h2Result]{head: make(chan struct{}), done: make(chan h2Result, 1)}
	go func() {
		var r h2Result
		headed := false
		defer func() {
			if !headed {
				close(x.head)
			}
			x.done <- r
		}()
		for !r.ended {
			f, err := h.fr.ReadFrame()
			if err != nil {
				r.err = err
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = h.fr.WriteSettingsAck()
				}
			case *http2.PingFrame:
				if !f.IsAck() {
					_ = h.fr.WritePing(true, f.Data)
				}
			case *http2.GoAwayFrame:
				r.goAway, r.goAwayCode, r.goAwayBeforeEnd = time.Now(), f.ErrCode, true
			case *http2.MetaHeadersFrame:
				if f.StreamID == id {
					r.status, _ = strconv.Atoi(f.PseudoValue("status"))
					r.ended = f.StreamEnded()
					if !headed {
						headed = true
						close(x.head)
					}
				}
			case *http2.DataFrame:
				if f.StreamID == id {
					r.body = append(r.body, f.Data()...)
					r.ended = f.StreamEnded()
					if n := uint32(len(f.Data())); n > 0 { //nolint:gosec // a frame's length
						_ = h.fr.WriteWindowUpdate(0, n)
						_ = h.fr.WriteWindowUpdate(id, n)
					}
				}
			case *http2.RSTStreamFrame:
				if f.StreamID == id {
					r.err = fmt.Errorf("stream reset: %v", f.ErrCode)
					return
				}
			}
		}
	}()
	return x
}
