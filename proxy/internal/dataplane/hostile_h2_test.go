package dataplane_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/forward"
	"coxswain.dev/coxswain/proxy/internal/dataplane/listener"
)

// h2Conn is a raw HTTP/2 client connection with prior knowledge: the test writes frames and
// reads what the proxy answers, frame by frame.
type h2Conn struct {
	t      *testing.T
	c      net.Conn
	fr     *http2.Framer
	enc    *hpack.Encoder
	encBuf bytes.Buffer
	mu     sync.Mutex
}

func dialH2(t *testing.T, addr string, settings ...http2.Setting) *h2Conn {
	t.Helper()
	c, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	h := &h2Conn{t: t, c: c, fr: http2.NewFramer(c, c)}
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	h.fr.MaxHeaderListSize = 1 << 20
	h.enc = hpack.NewEncoder(&h.encBuf)
	if err := h.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return h
}

// headerBlock encodes pairs of names and values.
func (h *h2Conn) headerBlock(pairs ...string) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.encBuf.Reset()
	for i := 0; i+1 < len(pairs); i += 2 {
		_ = h.enc.WriteField(hpack.HeaderField{Name: pairs[i], Value: pairs[i+1]})
	}
	return append([]byte(nil), h.encBuf.Bytes()...)
}

// request sends HEADERS on stream id, ending the stream when endStream.
func (h *h2Conn) request(id uint32, endStream bool, pairs ...string) {
	h.t.Helper()
	err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.headerBlock(pairs...), EndStream: endStream, EndHeaders: true})
	if err != nil {
		h.t.Fatal(err)
	}
}

// get is the request pairs of a GET of path on host.
func get(host, path string, more ...string) []string {
	return append([]string{":method", "GET", ":scheme", "http", ":authority", host, ":path", path}, more...)
}

// streamOutcome reads frames until stream id ends, acknowledging settings and pings, and
// returns its status (0 when none came), its body, and the RST_STREAM code when it was reset.
// A GOAWAY or a closed connection ends it too.
type streamOutcome struct {
	status   int
	body     []byte
	reset    bool
	code     http2.ErrCode
	goAway   bool
	trailers map[string]string
	headers  map[string]string
}

func (h *h2Conn) await(id uint32) streamOutcome {
	h.t.Helper()
	var out streamOutcome
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			h.t.Logf("stream %d: read frame: %v", id, err)
			out.goAway = true
			return out
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
			h.t.Logf("stream %d: GOAWAY %v %s", id, f.ErrCode, f.DebugData())
			out.goAway = true
			return out
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				out.reset, out.code = true, f.ErrCode
				return out
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID != id {
				continue
			}
			fields := map[string]string{}
			for _, hf := range f.Fields {
				fields[hf.Name] = hf.Value
			}
			if s, ok := fields[":status"]; ok {
				n, _ := strconv.Atoi(s)
				if n >= 200 {
					out.status, out.headers = n, fields
				}
			} else {
				out.trailers = fields
			}
			if f.StreamEnded() {
				return out
			}
		case *http2.DataFrame:
			if f.StreamID != id {
				continue
			}
			out.body = append(out.body, f.Data()...)
			if n := len(f.Data()); n > 0 {
				_ = h.fr.WriteWindowUpdate(0, uint32(n))
				_ = h.fr.WriteWindowUpdate(id, uint32(n))
			}
			if f.StreamEnded() {
				return out
			}
		}
	}
}

// Tests HTTP/2 requests that must never reach a backend as they are: a content-length that
// disagrees with the body (the request smuggling of an HTTP/2 to HTTP/1.1 hop) and a :method
// that is not a token. Each is refused on its stream while the connection stays usable, and
// :authority wins over a host header.
func TestHostileHTTP2Requests(t *testing.T) {
	t.Parallel()
	var wholeShortBody atomic.Bool
	be := newRawBackend(t, func(b *rawBackend, br *bufio.Reader, c net.Conn) {
		for {
			r, err := b.read(br)
			if err != nil {
				return
			}
			if r.RequestURI == "/short" {
				// Read the body as its framing says: it must never arrive whole.
				if _, err := io.ReadFull(r.Body, make([]byte, 10)); err == nil {
					wholeShortBody.Store(true)
				}
				return
			}
			body := "target=" + r.RequestURI
			if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
				return
			}
		}
	})
	d := start(t, dataplane.Options{})
	h := dialH2(t, routeAll(t, d, be.addr()))

	h.request(1, true, get("x", "/smuggle", "content-length", "40")...)
	if got := h.await(1); !got.reset && got.status != 400 {
		t.Errorf("GET with content-length 40 and no body: status %d reset %v, want a stream error", got.status, got.reset)
	}
	h.request(3, true, ":method", "GET /admin HTTP/1.1\r\nX:", ":scheme", "http", ":authority", "x", ":path", "/")
	if got := h.await(3); !got.reset && got.status != 400 {
		t.Errorf("a :method with spaces: status %d reset %v, want a refusal", got.status, got.reset)
	}
	h.request(5, false, ":method", "POST", ":scheme", "http", ":authority", "x", ":path", "/short", "content-length", "10")
	_ = h.fr.WriteData(5, true, []byte("abc"))
	if got := h.await(5); !got.reset && got.status != 400 && got.status != 502 {
		t.Errorf("POST with content-length 10 and a 3-byte body: status %d reset %v goaway %v, want a stream error", got.status, got.reset, got.goAway)
	}
	if wholeShortBody.Load() {
		t.Error("the backend read a whole 10-byte body the client never sent")
	}
	h.request(7, true, get("authority.example", "/ok", "host", "host.example")...)
	if got := h.await(7); got.status != 200 || string(got.body) != "target=/ok" {
		t.Fatalf("a good request after the refusals got %d %q", got.status, got.body)
	}
	// The short POST's head may have left before its body fell short (bodies stream); its
	// upstream connection is then closed mid-body, so nothing of it is read as a request.
	var seen []string
	for _, r := range be.requests() {
		if r.RequestURI != "/short" {
			seen = append(seen, r.Method+" "+r.RequestURI+" "+r.Host)
		}
	}
	if len(seen) != 1 || seen[0] != "GET /ok authority.example" {
		t.Errorf("backend received %q; want only GET /ok for authority.example", seen)
	}
}

// Tests that the proxy advertises its HTTP/2 limits: concurrent streams and header list size.
func TestHTTP2AdvertisesItsLimits(t *testing.T) {
	t.Parallel()
	app, _ := backend(t, "app")
	d := start(t, dataplane.Options{Listener: listener.Options{HTTP2MaxConcurrentStreams: 7, MaxHeaderBytes: 9000}})
	h := dialH2(t, routeAll(t, d, hostPort(app)))
	f, err := h.fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok {
		t.Fatalf("first frame %T, want SETTINGS", f)
	}
	streams, _ := sf.Value(http2.SettingMaxConcurrentStreams)
	list, _ := sf.Value(http2.SettingMaxHeaderListSize)
	if streams != 7 || list < 9000 || list > 9000+8192 {
		t.Errorf("advertised %d streams and a %d-byte header list; want 7 and about 9000", streams, list)
	}
}

// Tests that HTTP/2 abuse on one connection leaves other clients served: rapid reset (streams
// opened and cancelled at once, by the thousand), a CONTINUATION flood, and streams whose
// client never opens its receive window, which the send timeout resets.
func TestHTTP2AbuseLeavesOthersServed(t *testing.T) {
	t.Parallel()
	app, _ := backend(t, "app")
	big := newRawBackend(t, func(b *rawBackend, br *bufio.Reader, c net.Conn) {
		for {
			if _, err := b.read(br); err != nil {
				return
			}
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4194304\r\n\r\n"); err != nil {
				return
			}
			if _, err := c.Write(make([]byte, 4<<20)); err != nil {
				return
			}
		}
	})
	d := start(t, dataplane.Options{
		Listener: listener.Options{SendTimeout: 500 * time.Millisecond},
		Forward:  forward.Options{SendTimeout: 500 * time.Millisecond},
	})
	proxy := routeAll(t, d, hostPort(app))
	served := func(t *testing.T, what string) {
		t.Helper()
		if r := do(t, client(proxy), "GET", "http://x/probe"); r.status != 200 {
			t.Fatalf("another client during %s got %d", what, r.status)
		}
	}

	t.Run("rapid reset", func(t *testing.T) {
		h := dialH2(t, proxy)
		block := h.headerBlock(get("x", "/reset", "x-sleep", "1s")...)
		for i := range uint32(2000) {
			id := 2*i + 1
			if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true}); err != nil {
				break // the proxy may close the connection: that is allowed
			}
			if err := h.fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
				break
			}
		}
		served(t, "a rapid reset")
	})
	t.Run("CONTINUATION flood", func(t *testing.T) {
		h := dialH2(t, proxy)
		block := h.headerBlock(get("x", "/")...)
		_ = h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndStream: true, EndHeaders: false})
		filler := h.headerBlock("x-filler", string(bytes.Repeat([]byte("a"), 8000)))
		closed := false
		for range 2000 {
			if err := h.fr.WriteContinuation(1, false, filler); err != nil {
				closed = true
				break
			}
		}
		if !closed {
			if got := h.await(1); !got.goAway {
				t.Errorf("16 MB of CONTINUATION frames were taken: status %d", got.status)
			}
		}
		served(t, "a CONTINUATION flood")
	})
	t.Run("zero-window streams are reset by the send timeout", func(t *testing.T) {
		routeAll(t, d, big.addr())
		h := dialH2(t, proxy, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		for i := range uint32(20) {
			h.request(2*i+1, true, get("x", "/big")...)
		}
		reset := 0
		deadline := time.Now().Add(10 * time.Second)
		for reset < 20 && time.Now().Before(deadline) {
			f, err := h.fr.ReadFrame()
			if err != nil {
				break
			}
			switch f := f.(type) {
			case *http2.RSTStreamFrame:
				reset++
			case *http2.GoAwayFrame:
				reset = 20 // the whole connection was given up: every stream ends
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = h.fr.WriteSettingsAck()
				}
			}
		}
		if reset < 20 {
			t.Errorf("%d of 20 zero-window streams were reset within 10s", reset)
		}
		routeAll(t, d, hostPort(app))
		served(t, "zero-window streams")
	})
}
