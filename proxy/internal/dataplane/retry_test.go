package dataplane_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
	"coxswain.dev/coxswain/proxy/internal/dataplane/upstream"
)

// flaky starts a backend that answers the requests of each ?key= with the status in ?code=
// (or, with ?sleep=, after sleeping that long) for the first ?fail= of them, and 200 with
// the request body after that. It counts the requests of each key.
func flaky(t *testing.T) (*httptest.Server, func(key string) int) {
	t.Helper()
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen[q.Get("key")]++
		n := seen[q.Get("key")]
		mu.Unlock()
		fail, _ := strconv.Atoi(q.Get("fail"))
		if n <= fail {
			if d, err := time.ParseDuration(q.Get("sleep")); err == nil {
				select {
				case <-time.After(d):
				case <-r.Context().Done():
					return
				}
			} else {
				code, _ := strconv.Atoi(q.Get("code"))
				w.WriteHeader(code)
				return
			}
		}
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv, func(key string) int {
		mu.Lock()
		defer mu.Unlock()
		return seen[key]
	}
}

func withRetry(codes []uint32, attempts uint32, backoff int64) func(*discoveryv1.Route) {
	return func(r *discoveryv1.Route) {
		r.Retry = &discoveryv1.Retry{Codes: codes, Attempts: attempts, Backoff: ms(backoff)}
	}
}

func send(t *testing.T, proxy, method, target, body string) int {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, "http://x"+target, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client(proxy).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode == http.StatusOK && string(got) != body {
		t.Errorf("body %q, want %q", got, body)
	}
	return resp.StatusCode
}

// Tests the retry policy on status codes: a listed code is retried until the backend recovers
// or the attempts run out, an unlisted one is not, a non-idempotent method is never retried,
// and an idempotent one with a small body sends the whole body again.
func TestRetryOnStatus(t *testing.T) {
	t.Parallel()
	srv, seen := flaky(t)
	reg := prometheus.NewRegistry()
	// A floor of a retry a millisecond: the cases retry at once, more than a quiet cluster's
	// budget allows (TestRetryBudgetBoundsAQuietCluster).
	d := start(t, dataplane.Options{Registerer: reg, Upstream: upstream.Options{RetryBudgetMinPerSecond: 1000}})
	proxy := routeAll(t, d, hostPort(srv), withRetry([]uint32{500, 503}, 2, 1))
	cases := []struct {
		name, method, query, body string
		status, requests          int
	}{
		{"503 then 200 is 200", "GET", "code=503&fail=1", "", 200, 2},
		{"retries stop at attempts", "GET", "code=500&fail=5", "", 500, 3},
		{"an unlisted code is not retried", "GET", "code=502&fail=1", "", 502, 1},
		{"a POST is not retried", "POST", "code=503&fail=1", "payload", 503, 1},
		{"a PUT is retried with its body", "PUT", "code=503&fail=2", "payload", 200, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			key := strings.ReplaceAll(c.name, " ", "-")
			if got := send(t, proxy, c.method, "/?key="+key+"&"+c.query, c.body); got != c.status {
				t.Errorf("status %d, want %d", got, c.status)
			}
			if got := seen(key); got != c.requests {
				t.Errorf("backend got %d requests, want %d", got, c.requests)
			}
		})
	}
	t.Run("a streamed body is not retried", func(t *testing.T) {
		t.Parallel()
		pr, pw := io.Pipe()
		go func() {
			_, _ = io.WriteString(pw, "chunk")
			_ = pw.Close()
		}()
		req, _ := http.NewRequestWithContext(context.Background(), "PUT", "http://x/?key=streamed&code=503&fail=1", pr)
		resp, err := client(proxy).Do(req) // unknown length: chunked
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != 503 || seen("streamed") != 1 {
			t.Errorf("status %d after %d requests, want 503 after 1", resp.StatusCode, seen("streamed"))
		}
	})
}

// Tests the retries of failed exchanges and their interplay with the timeouts: a refused
// connection goes to the next endpoint, an attempt past the backend request timeout is tried
// again, and the request timeout ends the request with 504 whatever attempts are left.
func TestRetryOnFailureAndTimeouts(t *testing.T) {
	t.Parallel()
	srv, seen := flaky(t)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	_ = dead.Close()
	d := start(t, dataplane.Options{})
	backendTimeout := func(r *discoveryv1.Route) {
		r.Timeouts = &discoveryv1.Timeouts{Request: ms(3000), BackendRequest: ms(150)}
	}
	requestTimeout := func(r *discoveryv1.Route) {
		r.Timeouts = &discoveryv1.Timeouts{Request: ms(400)}
	}
	routes := []*discoveryv1.Route{
		snaptest.Route("ns/r/0/0", "", snaptest.Prefix("/connect"), "ns/half:80"),
		snaptest.Route("ns/r/1/0", "", snaptest.Prefix("/backend-timeout"), "ns/app:80"),
		snaptest.Route("ns/r/2/0", "", snaptest.Prefix("/request-timeout"), "ns/app:80"),
	}
	for _, r := range routes {
		withRetry([]uint32{503}, 3, 10)(r)
	}
	backendTimeout(routes[1])
	requestTimeout(routes[2])
	apply(t, d, snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "", routes...)),
		snaptest.Cluster(t, "ns/half:80", deadAddr, hostPort(srv)), snaptest.Cluster(t, "ns/app:80", hostPort(srv)))
	proxy := addr(t, d, 80)

	t.Run("a refused connection is retried on the next endpoint", func(t *testing.T) {
		for i := range 4 {
			if got := send(t, proxy, "GET", "/connect?key=c"+strconv.Itoa(i), ""); got != 200 {
				t.Errorf("request %d: status %d, want 200", i, got)
			}
		}
	})
	t.Run("an attempt past the backend request timeout is retried", func(t *testing.T) {
		if got := send(t, proxy, "GET", "/backend-timeout?key=bt&fail=1&sleep=1s", ""); got != 200 {
			t.Errorf("status %d, want 200", got)
		}
		if seen("bt") != 2 {
			t.Errorf("backend got %d requests, want 2", seen("bt"))
		}
	})
	t.Run("the request timeout ends the retries with 504", func(t *testing.T) {
		begin := time.Now()
		if got := send(t, proxy, "GET", "/request-timeout?key=rt&fail=9&sleep=1s", ""); got != 504 {
			t.Errorf("status %d, want 504", got)
		}
		if took := time.Since(begin); took > 900*time.Millisecond {
			t.Errorf("took %s, want about the 400ms request timeout", took)
		}
	})
}

// Tests the retry budget: under a burst of failing requests the retries in flight stay within
// the budget (20% of the 60 requests in flight, at most 12), the rest are refused and counted,
// and every client still gets the backend's answer.
func TestRetryBudgetUnderBurst(t *testing.T) {
	t.Parallel()
	srv, seen := flaky(t)
	reg := prometheus.NewRegistry()
	d := start(t, dataplane.Options{Registerer: reg})
	// A long backoff keeps each granted retry in flight while the burst lasts.
	proxy := routeAll(t, d, hostPort(srv), withRetry([]uint32{503}, 1, 500))
	const burst = 60
	var wg sync.WaitGroup
	var not503 atomic.Int64
	for i := range burst {
		wg.Go(func() {
			if got := send(t, proxy, "GET", "/?code=503&fail=99&key=k"+strconv.Itoa(i), ""); got != 503 {
				not503.Add(1)
			}
		})
	}
	wg.Wait()
	sent := metricValue(t, reg, "coxswain_proxy_retries_total", "sent")
	exhausted := metricValue(t, reg, "coxswain_proxy_retries_total", "budget_exhausted")
	if not503.Load() != 0 {
		t.Errorf("%d requests did not get the backend's 503", not503.Load())
	}
	if sent+exhausted != burst || sent > burst*20/100 || exhausted < burst-burst*20/100 {
		t.Errorf("retries sent %v, refused by the budget %v; want at most %d sent of %d", sent, exhausted, burst*20/100, burst)
	}
	total := 0
	for i := range burst {
		total += seen("k" + strconv.Itoa(i))
	}
	if total != burst+int(sent) {
		t.Errorf("backend got %d requests, want %d", total, burst+int(sent))
	}
}
