package dataplane_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/forward"
	"coxswain.dev/coxswain/proxy/internal/dataplane/listener"
)

// heapWatch samples the heap in use every few milliseconds until stopped and reports the
// largest growth over the heap at its start.
type heapWatch struct {
	base, peak uint64
	stop       chan struct{}
	done       chan struct{}
}

func watchHeap() *heapWatch {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	w := &heapWatch{base: ms.HeapInuse, peak: ms.HeapInuse, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				w.peak = max(w.peak, ms.HeapInuse)
			}
		}
	}()
	return w
}

// growth stops the watch and returns the peak growth in MiB.
func (w *heapWatch) growth() float64 {
	close(w.stop)
	<-w.done
	return float64(w.peak-w.base) / (1 << 20)
}

// patternBlock is what pattern repeats: 64 KiB with no period shorter than itself.
var patternBlock = func() []byte {
	b := make([]byte, 64<<10)
	for i := range b {
		b[i] = byte(i*7 + i>>9)
	}
	return b
}()

// pattern is an endless deterministic byte stream, cheap to make and to check.
type pattern struct{ n int }

func (p *pattern) Read(b []byte) (int, error) {
	n := copy(b, patternBlock[p.n%len(patternBlock):])
	p.n += n
	return n, nil
}

// Tests that a 1 GiB response and a 256 MiB upload stream through the proxy with the heap
// bounded (the whole test process's heap, proxy included, grows by less than 64 MiB), and that
// the bytes arrive intact.
func TestLargeBodiesStreamWithBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 1.25 GiB")
	}
	const download, upload = 1 << 30, 256 << 20
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			h := sha256.New()
			n, _ := io.Copy(h, r.Body)
			_, _ = fmt.Fprintf(w, "%d %x", n, h.Sum(nil))
			return
		}
		_, _ = io.Copy(w, io.LimitReader(&pattern{}, download)) // chunked: no Content-Length
	}))
	t.Cleanup(srv.Close)
	d := start(t, dataplane.Options{})
	c := client(routeAll(t, d, hostPort(srv)))
	c.Timeout = 5 * time.Minute

	heap := watchHeap()
	resp, err := c.Get("http://x/download")
	if err != nil {
		t.Fatal(err)
	}
	want := sha256.New()
	_, _ = io.Copy(want, io.LimitReader(&pattern{}, download))
	got := sha256.New()
	n, err := io.Copy(got, resp.Body)
	_ = resp.Body.Close()
	if err != nil || n != download || !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Fatalf("download: %d bytes, %v, digest match %v", n, err, bytes.Equal(got.Sum(nil), want.Sum(nil)))
	}
	resp, err = c.Post("http://x/upload", "application/octet-stream", io.LimitReader(&pattern{}, upload))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	up := sha256.New()
	_, _ = io.Copy(up, io.LimitReader(&pattern{}, upload))
	if wantBody := fmt.Sprintf("%d %x", upload, up.Sum(nil)); string(body) != wantBody {
		t.Fatalf("upload: backend got %q, want %q", body, wantBody)
	}
	if g := heap.growth(); g > 64 {
		t.Errorf("heap grew by %.1f MiB moving 1.25 GiB", g)
	}
}

// Tests that announcing a large body costs nothing until it arrives: 20 connections each
// promising 64 MiB and sending none of it leave the heap almost where it was. Not parallel:
// it measures the whole process's heap.
func TestAnnouncedBodiesReserveNothing(t *testing.T) {
	hold := make(chan struct{})
	var arrived atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		<-hold
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(hold) })
	d := start(t, dataplane.Options{})
	proxy := routeAll(t, d, hostPort(srv))
	heap := watchHeap()
	for range 20 {
		c, _ := rawConn(t, proxy)
		_, _ = io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 67108864\r\n\r\nabc")
	}
	// Each request reaches the backend once the proxy has taken it in and started its body.
	eventually(t, "all twenty requests reached the backend", func() bool { return arrived.Load() == 20 })
	if g := heap.growth(); g > 16 {
		t.Errorf("heap grew by %.1f MiB for 20 announced 64 MiB bodies", g)
	}
}

// Tests that a streamed response reaches the client as the backend sends it: the first server
// sent event arrives while the backend is still holding the response open.
func TestServerSentEventsAreNotBuffered(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
		_, _ = io.WriteString(w, "data: last\n\n")
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	d := start(t, dataplane.Options{})
	c, br := rawConn(t, routeAll(t, d, hostPort(srv)))
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, _ = io.WriteString(c, "GET /events HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "data: first\n" {
		t.Fatalf("first event: %q, %v; want it before the backend finishes", line, err)
	}
}

// Tests that a response the backend cuts short is never handed over as complete: the client
// sees its connection or stream end early, over HTTP/1.1 with Content-Length and with chunked
// framing, and over HTTP/2.
func TestTruncatedResponseIsNotComplete(t *testing.T) {
	t.Parallel()
	be := newRawBackend(t, func(b *rawBackend, br *bufio.Reader, c net.Conn) {
		r, err := b.read(br)
		if err != nil {
			return
		}
		if r.URL.Path == "/chunked" {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nonly this")
	})
	d := start(t, dataplane.Options{})
	proxy := routeAll(t, d, be.addr())
	for _, path := range []string{"/length", "/chunked"} {
		resp, err := client(proxy).Get("http://x" + path)
		if err != nil {
			continue // refused outright is fine too
		}
		_, err = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err == nil {
			t.Errorf("HTTP/1.1 %s: a cut response was read as complete", path)
		}
	}
	h := dialH2(t, proxy)
	h.request(1, true, get("x", "/length")...)
	if got := h.await(1); !got.reset && !got.goAway {
		t.Errorf("HTTP/2: a cut response ended cleanly with %d bytes", len(got.body))
	}
}

// Tests that a client that leaves cancels its backend request.
func TestClientCancellationReachesTheBackend(t *testing.T) {
	t.Parallel()
	cancelled := make(chan struct{})
	started := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
		close(cancelled)
	}))
	t.Cleanup(srv.Close)
	d := start(t, dataplane.Options{})
	c, _ := rawConn(t, routeAll(t, d, hostPort(srv)))
	_, _ = io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	<-started
	_ = c.Close()
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("backend request still running 5s after its client left")
	}
}

// Tests the deadlines of a request in flight: a client that stops sending its body gets 408
// (not a backend error), a backend that stops sending its response is cut, and a client that
// stops reading is given up; each is counted with its reason.
func TestInFlightDeadlines(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/upload":
			_, _ = io.Copy(io.Discard, r.Body)
		case "/stall":
			w.Header().Set("Content-Length", "100")
			_, _ = io.WriteString(w, "part")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		case "/big":
			_, _ = io.Copy(w, io.LimitReader(&pattern{}, 64<<20))
		}
	}))
	t.Cleanup(srv.Close)
	reg := prometheus.NewRegistry()
	d := start(t, dataplane.Options{Registerer: reg, Forward: forward.Options{
		BodyReadTimeout: 300 * time.Millisecond, BackendIdleTimeout: 300 * time.Millisecond, SendTimeout: 300 * time.Millisecond,
	}})
	proxy := routeAll(t, d, hostPort(srv))
	refused := func(reason string) float64 {
		return metricValue(t, reg, "coxswain_proxy_refused_requests_total", reason)
	}

	t.Run("a stalled request body gets 408", func(t *testing.T) {
		c, br := rawConn(t, proxy)
		_, _ = io.WriteString(c, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Fatalf("got %d, want 408", resp.StatusCode)
		}
		eventually(t, "body_timeout is counted", func() bool { return refused("body_timeout") == 1 })
	})
	t.Run("a stalled response body is cut", func(t *testing.T) {
		resp, err := client(proxy).Get("http://x/stall")
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err == nil {
			t.Fatal("a stalled response was read as complete")
		}
		eventually(t, "upstream_body_error is counted", func() bool { return refused("upstream_body_error") == 1 })
	})
	t.Run("a client that stops reading is given up", func(t *testing.T) {
		c, _ := rawConn(t, proxy)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4096)
		}
		_, _ = io.WriteString(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
		eventually(t, "send_error is counted", func() bool { return refused("send_error") == 1 })
	})
}

// Tests the connection limit: connections beyond it are closed at once and counted, and the
// established ones stay served.
func TestConnectionLimit(t *testing.T) {
	t.Parallel()
	app, _ := backend(t, "app")
	reg := prometheus.NewRegistry()
	d := start(t, dataplane.Options{Registerer: reg, Listener: listener.Options{MaxConnections: 3}})
	proxy := routeAll(t, d, hostPort(app))
	var held []net.Conn
	var readers []*bufio.Reader
	for range 3 {
		c, br := rawConn(t, proxy)
		resp, _ := roundTrip(t, c, br, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp.StatusCode != 200 {
			t.Fatalf("got %d", resp.StatusCode)
		}
		held, readers = append(held, c), append(readers, br)
	}
	extra, _ := rawConn(t, proxy)
	if !closedByPeer(extra, 2*time.Second) {
		t.Error("a fourth connection was kept with a limit of three")
	}
	if got := metricValue(t, reg, "coxswain_proxy_refused_connections_total", ""); got < 1 {
		t.Errorf("refused connections counted %v", got)
	}
	if resp, _ := roundTrip(t, held[0], readers[0], "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 200 {
		t.Errorf("an established connection got %d", resp.StatusCode)
	}
}

// Tests the HTTP details a proxy must keep: 103 Early Hints are relayed, OPTIONS * is answered
// by the proxy and never rewritten into a path, HEAD and 304 keep their framing over HTTP/2,
// trailers and te: trailers cross in both directions (what gRPC needs), and the access log
// names the protocol the client spoke.
func TestHTTPSemanticsArePreserved(t *testing.T) {
	t.Parallel()
	var backendSaw sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		backendSaw.Store(r.URL.Path, r.Method+" "+r.RequestURI)
		switch r.URL.Path {
		case "/hints":
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
			_, _ = io.WriteString(w, "final")
		case "/head":
			w.Header().Set("Content-Length", "1234")
		case "/cached":
			w.WriteHeader(http.StatusNotModified)
		case "/grpc":
			body, _ := io.ReadAll(r.Body)
			w.Header().Set("Trailer", "Grpc-Status")
			w.Header().Set("X-Te", r.Header.Get("Te"))
			w.Header().Set("X-Request-Trailer", r.Trailer.Get("X-Checksum"))
			_, _ = w.Write(body)
			w.Header().Set("Grpc-Status", "0")
		}
	}))
	t.Cleanup(srv.Close)
	var logged syncBuffer
	d := start(t, dataplane.Options{AccessLog: &logged})
	proxy := routeAll(t, d, hostPort(srv))

	t.Run("103 Early Hints reach the client", func(t *testing.T) {
		var hints []string
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				hints = append(hints, fmt.Sprintf("%d %s", code, h.Get("Link")))
				return nil
			},
		})
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://x/hints", nil)
		resp, err := client(proxy).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if len(hints) != 1 || hints[0] != "103 </style.css>; rel=preload" || string(body) != "final" || resp.Header.Get("Link") != "" {
			t.Errorf("hints %q, body %q, final Link %q", hints, body, resp.Header.Get("Link"))
		}
	})
	t.Run("OPTIONS * is answered by the proxy", func(t *testing.T) {
		c, br := rawConn(t, proxy)
		resp, _ := roundTrip(t, c, br, "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp.StatusCode != 200 {
			t.Errorf("got %d", resp.StatusCode)
		}
		backendSaw.Range(func(k, v any) bool {
			if strings.HasPrefix(v.(string), "OPTIONS") {
				t.Errorf("backend got %v", v)
			}
			return true
		})
	})
	h2 := h2cClient(proxy)
	t.Run("HEAD and 304 keep their framing over HTTP/2", func(t *testing.T) {
		resp, err := h2.Head("http://x/head")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.ContentLength != 1234 {
			t.Errorf("HEAD over %s: Content-Length %d, want 1234", resp.Proto, resp.ContentLength)
		}
		resp, err = h2.Get("http://x/cached")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 304 || len(body) != 0 {
			t.Errorf("304 over HTTP/2: %d with %d body bytes", resp.StatusCode, len(body))
		}
	})
	t.Run("trailers and te: trailers cross both ways", func(t *testing.T) {
		req, _ := http.NewRequestWithContext(context.Background(), "POST", "http://x/grpc", io.NopCloser(strings.NewReader("payload")))
		req.Header.Set("Te", "trailers")
		req.Trailer = http.Header{"X-Checksum": {"abc"}}
		resp, err := h2.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if string(body) != "payload" || resp.Trailer.Get("Grpc-Status") != "0" || resp.Header.Get("X-Te") != "trailers" || resp.Header.Get("X-Request-Trailer") != "abc" {
			t.Errorf("body %q, Grpc-Status trailer %q, backend te %q, backend request trailer %q",
				body, resp.Trailer.Get("Grpc-Status"), resp.Header.Get("X-Te"), resp.Header.Get("X-Request-Trailer"))
		}
	})
	t.Run("the access log names HTTP/2", func(t *testing.T) {
		_ = d.Shutdown(context.Background()) // flushes the access log
		if !strings.Contains(logged.String(), `"protocol":"HTTP/2.0"`) {
			t.Errorf("access log has no HTTP/2.0 entry:\n%s", logged.String())
		}
	})
}

// h2cClient speaks HTTP/2 with prior knowledge to addr.
func h2cClient(addr string) *http.Client {
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	c := client(addr)
	c.Transport.(*http.Transport).Protocols = &protocols
	return c
}

// syncBuffer is a bytes.Buffer safe for the access log's writer and the test's reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// metricValue returns the value of the counter name whose labels include value, or whose
// only series it is when value is empty; 0 when there is none yet.
func metricValue(t *testing.T, reg *prometheus.Registry, name, value string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if value == "" {
				return m.GetCounter().GetValue()
			}
			for _, l := range m.GetLabel() {
				if l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
