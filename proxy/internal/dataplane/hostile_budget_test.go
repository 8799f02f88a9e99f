package dataplane_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"coxswain.dev/coxswain/proxy/internal/dataplane"
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
		if arrived.Load() != 2 {
			t.Errorf("%d slow uploads reached the backend, want the client's share of 2", arrived.Load())
		}
		if status, took := timedGet(t, proxy, "127.0.0.2"); status != http.StatusOK {
			t.Errorf("another client got %d after %s while one held its share; want 200", status, took)
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
