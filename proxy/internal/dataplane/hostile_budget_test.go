package dataplane_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	rtmetrics "runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http2"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/forward"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
	"coxswain.dev/coxswain/proxy/internal/dataplane/upstream"
)

// readingBackend answers 200 once it has read a request's whole body, and counts the
// requests that reached it.
func readingBackend(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var arrived atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	return srv, &arrived
}

// clientFrom is client dialing from the local address local (another loopback address is
// another client for the proxy's per-client share), with a short timeout.
func clientFrom(addr, local string) *http.Client {
	c := client(addr)
	dialer := &net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	c.Transport.(*http.Transport).DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return dialer.DialContext(ctx, network, addr)
	}
	c.Timeout = 4 * time.Second
	return c
}

// slowUploads opens n HTTP/1.1 connections from local that each announce a 100-byte body and
// send one byte of it, holding an upstream connection each while the backend waits for the
// rest.
func slowUploads(t *testing.T, proxy, local string, n int) {
	t.Helper()
	dialer := &net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	for range n {
		c, err := dialer.DialContext(context.Background(), "tcp", proxy)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\na"); err != nil {
			t.Fatal(err)
		}
	}
}

// timedGet sends a GET from local and returns its status (0 when it got no answer) and how
// long it took.
func timedGet(t *testing.T, proxy, local string) (int, time.Duration) {
	t.Helper()
	begin := time.Now()
	req, err := http.NewRequestWithContext(context.Background(), "GET", "http://x/", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := clientFrom(proxy, local).Do(req)
	if err != nil {
		t.Logf("GET from %s: %v", local, err)
		return 0, time.Since(begin)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, time.Since(begin)
}

// Tests that slow uploads holding every upstream connection of an endpoint cannot make other
// clients wait without bound: a request beyond the pool waits at most the pending timeout, one
// beyond the pending cap is refused at once, and one client holds at most its share of the
// pool while another client is still served. Each refusal is a 503 counted by reason.
func TestUpstreamPoolIsBounded(t *testing.T) {
	t.Parallel()
	t.Run("a request waits at most the pending timeout", func(t *testing.T) {
		t.Parallel()
		be, arrived := readingBackend(t)
		reg := prometheus.NewRegistry()
		d := start(t, dataplane.Options{Registerer: reg, Upstream: upstream.Options{
			MaxConnsPerEndpoint: 4, PendingTimeout: 300 * time.Millisecond, ClientSharePercent: 100,
		}})
		proxy := routeAll(t, d, hostPort(be))
		slowUploads(t, proxy, "127.0.0.1", 4)
		eventually(t, "four slow uploads hold the pool", func() bool { return arrived.Load() == 4 })
		status, took := timedGet(t, proxy, "127.0.0.2")
		if status != http.StatusServiceUnavailable || took > 2*time.Second {
			t.Errorf("a request to a full pool got %d after %s; want 503 after about 300ms", status, took)
		}
		if got := metricValue(t, reg, "coxswain_proxy_upstream_errors_total", "pending_timeout"); got != 1 {
			t.Errorf("upstream_errors_total{reason=pending_timeout} = %v, want 1", got)
		}
	})
	t.Run("a request beyond the pending cap is refused at once", func(t *testing.T) {
		t.Parallel()
		be, arrived := readingBackend(t)
		reg := prometheus.NewRegistry()
		d := start(t, dataplane.Options{Registerer: reg, Upstream: upstream.Options{
			MaxConnsPerEndpoint: 4, MaxPendingPerEndpoint: 1, PendingTimeout: 3 * time.Second, ClientSharePercent: 100,
		}})
		proxy := routeAll(t, d, hostPort(be))
		slowUploads(t, proxy, "127.0.0.1", 4)
		eventually(t, "four slow uploads hold the pool", func() bool { return arrived.Load() == 4 })
		slowUploads(t, proxy, "127.0.0.3", 1) // waits for a place
		eventually(t, "the fifth upload waits", func() bool {
			return gaugeValue(t, reg, "coxswain_proxy_upstream_pending_requests") == 1
		})
		status, took := timedGet(t, proxy, "127.0.0.2")
		if status != http.StatusServiceUnavailable || took > time.Second {
			t.Errorf("a request beyond the pending cap got %d after %s; want 503 at once", status, took)
		}
		if got := metricValue(t, reg, "coxswain_proxy_upstream_errors_total", "pending_overflow"); got != 1 {
			t.Errorf("upstream_errors_total{reason=pending_overflow} = %v, want 1", got)
		}
	})
	t.Run("one client holds at most its share", func(t *testing.T) {
		t.Parallel()
		be, arrived := readingBackend(t)
		reg := prometheus.NewRegistry()
		d := start(t, dataplane.Options{Registerer: reg, Upstream: upstream.Options{
			MaxConnsPerEndpoint: 4, PendingTimeout: 3 * time.Second, ClientSharePercent: 50,
		}})
		proxy := routeAll(t, d, hostPort(be))
		slowUploads(t, proxy, "127.0.0.1", 4) // two hold their client's share, two are refused
		eventually(t, "the client's share is refused beyond two", func() bool {
			return metricValue(t, reg, "coxswain_proxy_upstream_errors_total", "client_share") == 2
		})
		eventually(t, "the client's share reached the backend", func() bool { return arrived.Load() == 2 })
		if status, took := timedGet(t, proxy, "127.0.0.2"); status != http.StatusOK {
			t.Errorf("another client got %d after %s while one held its share; want 200", status, took)
		}
		if got := arrived.Load(); got != 3 {
			t.Errorf("the backend got %d requests, want the client's share of 2 and the other client's 1", got)
		}
	})
}

// gaugeValue returns the value of the gauge name, 0 when it has no series.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) > 0 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}

// pingAcked sends a PING on h and reads frames until its ACK, acknowledging SETTINGS: the
// proxy reads a connection's frames in order, so every frame sent before it was processed.
func (h *h2Conn) pingAcked() {
	h.t.Helper()
	data := [8]byte{'b', 'u', 'd', 'g', 'e', 't'}
	if err := h.fr.WritePing(false, data); err != nil {
		h.t.Fatal(err)
	}
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			h.t.Fatalf("read frame: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = h.fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if f.IsAck() && f.Data == data {
				return
			}
		}
	}
}

// Tests that HEADERS-only streams announcing a 64 KiB body on a retry route and a mirror route
// reserve nothing: 5 HTTP/2 connections of 100 such streams each (32 MiB announced) grow the
// whole test process's heap by less than 12 MiB while the proxy waits for their bodies. Not
// parallel: it measures the process's heap.
func TestAnnouncedRetryBodiesReserveNothing(t *testing.T) {
	be, arrived := readingBackend(t)
	mirror, _ := readingBackend(t)
	d := start(t, dataplane.Options{})
	r := snaptest.Route("ns/r/0/0", "", snaptest.Prefix("/retry"), "ns/app:80")
	withRetry([]uint32{503}, 2, 1)(r)
	m := snaptest.Route("ns/m/0/0", "", snaptest.Prefix("/mirror"), "ns/app:80")
	m.Filters = []*discoveryv1.Filter{filter(&discoveryv1.Filter_Mirror{Mirror: &discoveryv1.Mirror{Cluster: "ns/mirror:80", Numerator: 1, Denominator: 1}})}
	apply(t, d, snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "", r, m)),
		snaptest.Cluster(t, "ns/app:80", hostPort(be)), snaptest.Cluster(t, "ns/mirror:80", hostPort(mirror)))
	proxy := addr(t, d, 80)
	heap := watchHeap()
	conns := make([]*h2Conn, 5)
	for i := range conns {
		h := dialH2(t, proxy)
		path := "/retry"
		if i%2 == 1 {
			path = "/mirror"
		}
		block := h.headerBlock(":method", "PUT", ":scheme", "http", ":authority", "x", ":path", path, "content-length", "65536")
		for s := range uint32(100) {
			if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 2*s + 1, BlockFragment: block, EndHeaders: true}); err != nil {
				t.Fatal(err)
			}
		}
		conns[i] = h
	}
	for _, h := range conns {
		h.pingAcked()
	}
	// Watch the heap for a second while the 500 handlers wait for their bodies.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) && heapInUse() < heap.base+12<<20 {
		time.Sleep(10 * time.Millisecond)
	}
	g := heap.growth()
	t.Logf("heap grew by %.1f MiB", g)
	if g > 12 {
		t.Errorf("heap grew by %.1f MiB for 500 HEADERS-only streams announcing 64 KiB each", g)
	}
	if arrived.Load() != 0 {
		t.Errorf("%d requests reached the backend without their bodies", arrived.Load())
	}
}

// Tests that buffered retry bodies count against the proxy-wide budget: while one upload holds
// most of it, a retriable PUT whose body does not fit is forwarded once, not retried, and not
// refused; once the budget is free again the same request is retried.
func TestRetryBodiesShareABudget(t *testing.T) {
	t.Parallel()
	srv, seen := flaky(t)
	reg := prometheus.NewRegistry()
	d := start(t, dataplane.Options{Registerer: reg, Forward: forward.Options{MaxBufferedBodyBytes: 64 << 10}})
	proxy := routeAll(t, d, hostPort(srv), withRetry([]uint32{503}, 1, 1))
	hold, _ := rawConn(t, proxy)
	if _, err := io.WriteString(hold, "PUT /?key=hold HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n"+strings.Repeat("h", 50000)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the held upload is buffered", func() bool {
		return gaugeValue(t, reg, "coxswain_proxy_buffered_body_bytes") >= 50000
	})
	body := strings.Repeat("b", 30000)
	if got := send(t, proxy, "PUT", "/?key=over&code=503&fail=1", body); got != 503 || seen("over") != 1 {
		t.Errorf("a retriable PUT over the budget got %d after %d attempts; want the backend's 503 after 1", got, seen("over"))
	}
	if got := metricValue(t, reg, "coxswain_proxy_body_buffer_refused_total", "retry"); got != 1 {
		t.Errorf("body_buffer_refused_total{use=retry} = %v, want 1", got)
	}
	_ = hold.Close()
	eventually(t, "the held upload's budget is free", func() bool {
		return gaugeValue(t, reg, "coxswain_proxy_buffered_body_bytes") == 0
	})
	if got := send(t, proxy, "PUT", "/?key=under&code=503&fail=1", body); got != 200 || seen("under") != 2 {
		t.Errorf("a retriable PUT within the budget got %d after %d attempts; want 200 after 2", got, seen("under"))
	}
}

func heapInUse() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// Tests that a WebSocket upgrade on a mirrored route is not mirrored (a mirror copy that
// upgraded would open a tunnel no timeout ends), and that Shutdown returns within its drain
// bound while the tunnel is open.
func TestMirroredUpgradeIsNotMirrored(t *testing.T) {
	t.Parallel()
	ws := wsBackend(t)
	var mirrored atomic.Int64
	mirror := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mirrored.Add(1)
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer func() { _ = conn.Close() }()
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_ = rw.Flush()
		_, _ = io.Copy(io.Discard, rw) // holds the mirror's tunnel open until the proxy closes it
	}))
	t.Cleanup(mirror.Close)
	r := snaptest.Route("ns/ws/0/0", "", snaptest.Prefix("/"), "ns/ws:80")
	r.Filters = []*discoveryv1.Filter{filter(&discoveryv1.Filter_Mirror{Mirror: &discoveryv1.Mirror{Cluster: "ns/mirror:80", Numerator: 1, Denominator: 1}})}
	d := start(t, dataplane.Options{})
	apply(t, d, snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "", r)),
		snaptest.Cluster(t, "ns/ws:80", hostPort(ws)), snaptest.Cluster(t, "ns/mirror:80", hostPort(mirror)))
	c, br := rawConn(t, addr(t, d, 80))
	if got := upgradeStatus(t, c, br, "GET /chat HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"); got != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade got %d, want 101", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	begin := time.Now()
	go func() { done <- d.Shutdown(ctx) }()
	select {
	case err := <-done:
		t.Logf("Shutdown: %v", err) // the drain runs out while the tunnel is open
		if took := time.Since(begin); took > 3*time.Second {
			t.Errorf("Shutdown with a 500ms drain took %s", took)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown with a 500ms drain still running after 5s")
	}
	if n := mirrored.Load(); n != 0 {
		t.Errorf("the mirror received %d copies of an upgrade, want none", n)
	}
}

// awaitGoAway reads frames until a GOAWAY (true) or until the connection fails or 5s pass
// (false), acknowledging SETTINGS and PINGs.
func (h *h2Conn) awaitGoAway() bool {
	h.t.Helper()
	_ = h.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			h.t.Logf("read frame: %v", err)
			return false
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			h.t.Logf("GOAWAY %v after stream %d", f.ErrCode, f.LastStreamID)
			return true
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = h.fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = h.fr.WritePing(true, f.Data)
			}
		}
	}
}

// Tests that rapid reset is answered with GOAWAY and that few of its requests reach the
// backend: 10,000 HEADERS+RST_STREAM pairs on one connection draw a GOAWAY, fewer than 100
// requests reach the backend, the connection is counted, and other clients stay served.
func TestRapidResetDrawsGoAway(t *testing.T) {
	t.Parallel()
	app, n := backend(t, "app")
	reg := prometheus.NewRegistry()
	d := start(t, dataplane.Options{Registerer: reg})
	proxy := routeAll(t, d, hostPort(app))
	h := dialH2(t, proxy)
	block := h.headerBlock(get("x", "/reset")...)
	for i := range uint32(10000) {
		id := 2*i + 1
		if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true}); err != nil {
			break
		}
		if err := h.fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
			break
		}
	}
	if !h.awaitGoAway() {
		t.Error("10,000 HEADERS+RST_STREAM pairs drew no GOAWAY")
	}
	t.Logf("%d requests reached the backend", n.Load())
	if got := n.Load(); got >= 100 {
		t.Errorf("%d of 10,000 reset requests reached the backend, want fewer than 100", got)
	}
	if got := metricValue(t, reg, "coxswain_proxy_closed_connections_total", "rapid_reset"); got != 1 {
		t.Errorf("closed_connections_total{reason=rapid_reset} = %v, want 1", got)
	}
	if r := do(t, client(proxy), "GET", "http://x/probe"); r.status != 200 {
		t.Errorf("another client after the rapid reset got %d", r.status)
	}
}

// Tests that a connection serves at most MaxRequestsPerConnection requests: over HTTP/1.1 the
// last one says Connection: close, over HTTP/2 it is followed by GOAWAY.
func TestRequestsPerConnectionAreCapped(t *testing.T) {
	t.Parallel()
	app, _ := backend(t, "app")
	reg := prometheus.NewRegistry()
	d := start(t, dataplane.Options{Registerer: reg, Forward: forward.Options{MaxRequestsPerConnection: 3}})
	proxy := routeAll(t, d, hostPort(app))
	c, br := rawConn(t, proxy)
	for i := range 3 {
		resp, _ := roundTrip(t, c, br, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp.StatusCode != 200 || resp.Close != (i == 2) {
			t.Errorf("HTTP/1.1 request %d: status %d, Connection: close %v; want 200, close only on the third", i+1, resp.StatusCode, resp.Close)
		}
	}
	h := dialH2(t, proxy)
	for i := range uint32(3) {
		h.request(2*i+1, true, get("x", "/")...)
		got := h.await(2*i + 1)
		if got.goAway != (i == 2) {
			t.Errorf("HTTP/2 request %d: GOAWAY %v, want one only with the third", i+1, got.goAway)
		}
		if got.goAway && got.status == 0 {
			got.status = h.await(2*i + 1).status // the response follows the GOAWAY that announced it last
		}
		if got.status != 200 {
			t.Errorf("HTTP/2 request %d: status %d, want 200", i+1, got.status)
		}
	}
	if got := metricValue(t, reg, "coxswain_proxy_closed_connections_total", "max_requests"); got != 2 {
		t.Errorf("closed_connections_total{reason=max_requests} = %v, want 2", got)
	}
}

// liveHeap is the heap the runtime found live at its last collection, after one now.
func liveHeap() uint64 {
	runtime.GC()
	s := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	rtmetrics.Read(s)
	return s[0].Value.Uint64()
}

// overload grows the process's heap by a 128 MiB ballast until the data plane whose metrics
// reg holds says it is overloaded (its watermark must be under the live heap plus the
// ballast), and returns the function that drops the ballast and waits until it no longer is.
func overload(t *testing.T, reg *prometheus.Registry) (relieve func()) {
	t.Helper()
	ballast := make([]byte, 128<<20)
	for i := 0; i < len(ballast); i += 4096 {
		ballast[i] = 1
	}
	eventually(t, "the proxy is overloaded", func() bool {
		runtime.GC()
		return gaugeValue(t, reg, "coxswain_proxy_overloaded") == 1
	})
	return func() {
		t.Helper()
		runtime.KeepAlive(ballast) // the ballast is garbage from here on
		eventually(t, "the proxy is no longer overloaded", func() bool {
			runtime.GC()
			return gaugeValue(t, reg, "coxswain_proxy_overloaded") == 0
		})
	}
}

// Tests the overload manager: above the memory watermark the proxy closes new connections on
// accept and answers requests on open ones 503 with Connection: close, counting both and
// logging the request with its reason; once memory is back under the watermark it serves
// again. The memory is the test process's own (the proxy reads the runtime's), grown by a
// ballast. Not parallel: it moves the process's heap.
func TestOverloadRefusesAboveTheWatermark(t *testing.T) {
	app, _ := backend(t, "app")
	reg := prometheus.NewRegistry()
	d, logs := logged(t, dataplane.Options{Registerer: reg, MemoryWatermark: liveHeap() + 64<<20})
	proxy := routeAll(t, d, hostPort(app))
	kept, br := rawConn(t, proxy)
	if resp, _ := roundTrip(t, kept, br, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatalf("before the ballast: %d", resp.StatusCode)
	}
	relieve := overload(t, reg)
	fresh, _ := rawConn(t, proxy)
	_, _ = io.WriteString(fresh, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if !closedByPeer(fresh, 2*time.Second) {
		t.Error("a new connection above the watermark was not closed")
	}
	if resp, _ := roundTrip(t, kept, br, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 503 || !resp.Close {
		t.Errorf("a request above the watermark got %d, Connection: close %v; want 503 and close", resp.StatusCode, resp.Close)
	}
	if got := metricValue(t, reg, "coxswain_proxy_overload_refused_total", "connection"); got < 1 {
		t.Errorf("overload_refused_total{kind=connection} = %v, want at least 1", got)
	}
	if got := metricValue(t, reg, "coxswain_proxy_refused_requests_total", "overloaded"); got != 1 {
		t.Errorf("refused_requests_total{reason=overloaded} = %v, want 1", got)
	}
	if line := logLine(t, logs, "reason", "overloaded"); line["status"] != 503.0 || line["clientPort"] != localPort(kept) || line["upstream"] != "" {
		t.Errorf("the refused request's access log line is %v", line)
	}
	relieve()
	if r := do(t, client(proxy), "GET", "http://x/"); r.status != 200 {
		t.Errorf("under the watermark again: %d", r.status)
	}
}

// Tests that the retry budget bounds a quiet cluster's retries by rate: twenty requests one
// after another on a route of 10 attempts, to a backend that always fails, draw at most 20% of
// them in retries plus the floor (its bucket's burst of RetryBudgetFloorWindow, then
// DefaultRetryBudgetMinPerSecond a second), not 10 retries each.
func TestRetryBudgetBoundsAQuietCluster(t *testing.T) {
	t.Parallel()
	srv, seen := flaky(t)
	reg := prometheus.NewRegistry()
	d := start(t, dataplane.Options{Registerer: reg})
	proxy := routeAll(t, d, hostPort(srv), withRetry([]uint32{503}, 10, 1))
	const requests = 20
	begin := time.Now()
	for i := range requests {
		if got := send(t, proxy, "GET", "/?code=503&fail=999&key=quiet", ""); got != 503 {
			t.Fatalf("request %d got %d, want the backend's 503", i, got)
		}
	}
	seconds := int(time.Since(begin)/time.Second) + 1
	burst := int(upstream.RetryBudgetFloorWindow/time.Second) * upstream.DefaultRetryBudgetMinPerSecond
	bound := requests + requests*upstream.RetryBudgetPercent/100 + burst + upstream.DefaultRetryBudgetMinPerSecond*seconds
	if bound >= requests*11 {
		t.Fatalf("the bound %d does not bound anything: %d requests of 11 attempts make %d", bound, requests, requests*11)
	}
	if got := seen("quiet"); got > bound {
		t.Errorf("%d requests drew %d attempts in %ds, want at most %d (the requests, 20%% in retries, the floor's burst and rate)", requests, got, seconds, bound)
	}
	if got := metricValue(t, reg, "coxswain_proxy_retries_total", "budget_exhausted"); got == 0 {
		t.Error("no retry was refused by the budget")
	}
}

// Tests that over HTTP/1.1 a backend's early answer to an upload reaches the client while the
// client is still sending its body, and that the connection is then closed rather than read
// for another request.
func TestEarlyAnswerReachesASlowUploader(t *testing.T) {
	t.Parallel()
	be := newRawBackend(t, func(b *rawBackend, br *bufio.Reader, c net.Conn) {
		if _, err := b.read(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 401 Unauthorized\r\nContent-Length: 4\r\n\r\nnope")
	})
	d := start(t, dataplane.Options{})
	c, br := rawConn(t, routeAll(t, d, be.addr()))
	if _, err := io.WriteString(c, "PUT /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n"+strings.Repeat("u", 1000)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no early answer while the upload goes on: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 401 || string(body) != "nope" || !resp.Close {
		t.Errorf("got %d %q, Connection: close %v; want the backend's 401 and close", resp.StatusCode, body, resp.Close)
	}
}

// Tests that the proxy advertises the HTTP/2 receive windows the memory budget is sized for:
// 64 KiB per stream and 512 KiB per connection by default.
func TestHTTP2WindowsAreBounded(t *testing.T) {
	t.Parallel()
	app, _ := backend(t, "app")
	d := start(t, dataplane.Options{})
	h := dialH2(t, routeAll(t, d, hostPort(app)))
	var stream uint32
	conn := uint32(65535) // the connection's initial window, before any WINDOW_UPDATE
	for stream == 0 || conn == 65535 {
		f, err := h.fr.ReadFrame()
		if err != nil {
			t.Fatalf("read frame: %v (stream window %d, connection window %d)", err, stream, conn)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if v, ok := f.Value(http2.SettingInitialWindowSize); ok && !f.IsAck() {
				stream = v
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				conn += f.Increment
			}
		}
	}
	if stream != 64<<10 || conn != 512<<10 {
		t.Errorf("advertised a %d-byte stream window and a %d-byte connection window; want 65536 and 524288", stream, conn)
	}
}

// Tests that the response which reaches the request cap closes its connection even when the
// proxy answers it itself (a route's direct status, whose answer clears the response header).
func TestRequestCapClosesTheConnectionOfADirectAnswer(t *testing.T) {
	t.Parallel()
	app, _ := backend(t, "app")
	d := start(t, dataplane.Options{Forward: forward.Options{MaxRequestsPerConnection: 2}})
	proxy := routeAll(t, d, hostPort(app), func(r *discoveryv1.Route) { r.DirectStatus = http.StatusForbidden })
	c, br := rawConn(t, proxy)
	for i := range 2 {
		resp, _ := roundTrip(t, c, br, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("request %d: status %d, want the route's 403", i+1, resp.StatusCode)
		}
		if resp.Close != (i == 1) {
			t.Errorf("request %d: Connection: close %v, want it only on the second", i+1, resp.Close)
		}
	}
	if !closedByPeer(c, 2*time.Second) {
		t.Error("the connection stayed open after the request cap's direct answer")
	}
}
