package dataplane_test

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/accesslog"
	"coxswain.dev/coxswain/proxy/internal/dataplane/forward"
	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// uuidV4 is the form of a generated request ID.
var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// logged starts a data plane whose access log lands in the returned buffer within milliseconds.
func logged(t *testing.T, opts dataplane.Options) (*dataplane.DataPlane, *syncBuffer) {
	t.Helper()
	var buf syncBuffer
	opts.AccessLog = &buf
	opts.AccessLogOptions.FlushInterval = 5 * time.Millisecond
	return start(t, opts), &buf
}

// logLine waits for the access log line whose field key has value want, and returns it decoded.
func logLine(t *testing.T, buf *syncBuffer, key string, want any) map[string]any {
	t.Helper()
	var found map[string]any
	eventually(t, fmt.Sprintf("a line with %s=%v is logged", key, want), func() bool {
		for line := range strings.Lines(buf.String()) {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("access log line %q: %v", line, err)
			}
			if m[key] == want {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

func localPort(c net.Conn) float64 { return float64(c.LocalAddr().(*net.TCPAddr).Port) }

// Tests that a client's request ID reaches the backend and the access log unchanged when it is
// valid, and that one too long, of bytes outside the allowed set, or sent twice is replaced by
// a generated one, which the backend and the log both get; a request without one gets one.
func TestRequestIDIsKeptOrReplaced(t *testing.T) {
	t.Parallel()
	app, _ := backend(t, "app")
	d, buf := logged(t, dataplane.Options{})
	proxy := routeAll(t, d, hostPort(app))
	valid := "0af7651916cd43dd8448eb211c80319c-b7ad6b71:4_2.x+/="
	cases := []struct {
		name, fields string
		kept         string
	}{
		{"a valid ID is kept", "X-Request-Id: " + valid + "\r\n", valid},
		{"an ID of 128 bytes is kept", "X-Request-Id: " + strings.Repeat("a", 128) + "\r\n", strings.Repeat("a", 128)},
		{"an ID of 129 bytes is replaced", "X-Request-Id: " + strings.Repeat("a", 129) + "\r\n", ""},
		{"an ID with a quote is replaced", "X-Request-Id: a\"}{\"injected\":1\r\n", ""},
		{"an ID with a space is replaced", "X-Request-Id: a b\r\n", ""},
		{"an ID with a comma is replaced", "X-Request-Id: a,b\r\n", ""},
		{"an ID with a byte above ASCII is replaced", "X-Request-Id: caf\xc3\xa9\r\n", ""},
		{"two IDs are replaced", "X-Request-Id: a\r\nX-Request-Id: b\r\n", ""},
		{"an empty ID is replaced", "X-Request-Id: \r\n", ""},
		{"a request without one gets one", "", ""},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, br := rawConn(t, proxy)
			path := "/case-" + strconv.Itoa(i)
			resp, body := roundTrip(t, c, br, "GET "+path+" HTTP/1.1\r\nHost: x\r\n"+tc.fields+"\r\n")
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			var e echo
			decodeEcho(t, body, &e)
			got := e.Headers["X-Request-Id"]
			if len(got) != 1 {
				t.Fatalf("backend got X-Request-Id %q, want one value", got)
			}
			if tc.kept != "" && got[0] != tc.kept {
				t.Errorf("backend got %q, want the client's %q", got[0], tc.kept)
			}
			if tc.kept == "" && !uuidV4.MatchString(got[0]) {
				t.Errorf("backend got %q, want a generated UUID", got[0])
			}
			line := logLine(t, buf, "path", path)
			if line["requestID"] != got[0] {
				t.Errorf("logged request ID %v, backend got %q", line["requestID"], got[0])
			}
		})
	}
}

// Tests the request ID options: another header name, replacing every client's ID, and turning
// IDs off, when the client's field passes unchecked and none is added.
func TestRequestIDOptions(t *testing.T) {
	t.Parallel()
	app, _ := backend(t, "app")
	cases := []struct {
		name   string
		opts   forward.Options
		header string
		check  func(t *testing.T, got []string, logged any)
	}{
		{"another header name carries the ID", forward.Options{RequestIDHeader: "x-trace-ref"}, "X-Trace-Ref", func(t *testing.T, got []string, logged any) {
			if len(got) != 1 || got[0] != "mine" || logged != "mine" {
				t.Errorf("backend got %q, log %v; want the client's", got, logged)
			}
		}},
		{"a valid ID is replaced when told to", forward.Options{ReplaceRequestID: true}, "X-Request-Id", func(t *testing.T, got []string, logged any) {
			if len(got) != 1 || !uuidV4.MatchString(got[0]) || logged != got[0] {
				t.Errorf("backend got %q, log %v; want a generated ID in both", got, logged)
			}
		}},
		{"IDs off pass the client's field unchecked", forward.Options{NoRequestID: true}, "X-Request-Id", func(t *testing.T, got []string, logged any) {
			if len(got) != 1 || got[0] != "mine" || logged != "" {
				t.Errorf("backend got %q, log %v; want the client's field and no logged ID", got, logged)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, buf := logged(t, dataplane.Options{Forward: tc.opts})
			proxy := routeAll(t, d, hostPort(app))
			r := do(t, client(proxy), "GET", "http://x/opts", tc.header+": mine")
			tc.check(t, r.echo.Headers[tc.header], logLine(t, buf, "path", "/opts")["requestID"])
		})
	}
	t.Run("IDs off add none", func(t *testing.T) {
		t.Parallel()
		d, _ := logged(t, dataplane.Options{Forward: forward.Options{NoRequestID: true}})
		proxy := routeAll(t, d, hostPort(app))
		if r := do(t, client(proxy), "GET", "http://x/"); r.echo.Headers["X-Request-Id"] != nil {
			t.Errorf("backend got X-Request-Id %q with IDs off", r.echo.Headers["X-Request-Id"])
		}
	})
}

// Tests that a forwarded request's line holds what the proxy knew of it: the client's address
// and port, the Gateway, listener, route and rule, the backend and its status, the body sizes
// both ways, and the durations, with no reason.
func TestAccessLogRecordsTheExchange(t *testing.T) {
	t.Parallel()
	app, _ := backend(t, "app")
	d, buf := logged(t, dataplane.Options{})
	r := snaptest.Route("ns/web/3/0", "", snaptest.Prefix("/"), "ns/app:80")
	apply(t, d, snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "", r)), snaptest.Cluster(t, "ns/app:80", hostPort(app)))
	c, br := rawConn(t, addr(t, d, 80))
	resp, body := roundTrip(t, c, br, "POST /upload HTTP/1.1\r\nHost: x\r\nX-Request-Id: exchange-1\r\nContent-Length: 5\r\n\r\nhello")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	line := logLine(t, buf, "requestID", "exchange-1")
	want := map[string]any{
		"clientAddress": "127.0.0.1", "clientPort": localPort(c), "protocol": "HTTP/1.1", "tlsVersion": "", "sni": "",
		"gateway": "ns/gw", "listener": "http", "host": "x", "method": "POST", "path": "/upload",
		"route": "ns/web", "rule": "3", "status": 200.0, "reason": "", "upstream": hostPort(app),
		"upstreamStatus": 200.0, "retries": 0.0, "bytesIn": 5.0, "bytesOut": float64(len(body)),
	}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("%s = %#v, want %#v", k, line[k], v)
		}
	}
	total, _ := line["durationMs"].(float64)
	connect, okConnect := line["upstreamConnectMs"].(float64)
	ttfb, okTTFB := line["ttfbMs"].(float64)
	if !okConnect || !okTTFB || connect < 0 || ttfb < connect || total < ttfb {
		t.Errorf("durations: total %v, connect %v, first byte %v; want 0 <= connect <= first byte <= total", line["durationMs"], line["upstreamConnectMs"], line["ttfbMs"])
	}
}

// Tests that HTTPS requests, over HTTP/2 and HTTP/1.1, are logged with the connection's TLS
// version and server name beside the same fields as plaintext ones.
func TestAccessLogRecordsTLS(t *testing.T) {
	t.Parallel()
	app, _ := backend(t, "app")
	cert, _ := snaptest.Certificate(t, "ns/cert", "a.example.com")
	vh := snaptest.VHost("https", "a.example.com", snaptest.Route("ns/secure/0/0", "", snaptest.Prefix("/"), "ns/app:80"))
	vh.Certificates = []string{"ns/cert"}
	d, buf := logged(t, dataplane.Options{})
	apply(t, d, snaptest.Listener("ns/gw", 443, discoveryv1.Protocol_PROTOCOL_HTTPS, vh), cert, snaptest.Cluster(t, "ns/app:80", hostPort(app)))
	for _, h2 := range []bool{true, false} {
		var served atomic.Pointer[tls.ConnectionState]
		id := "tls-h2-" + strconv.FormatBool(h2)
		if r := do(t, tlsClient(addr(t, d, 443), h2, &served), "GET", "https://a.example.com/", "X-Request-Id: "+id); r.status != 200 {
			t.Fatalf("h2 %v: status %d", h2, r.status)
		}
		line := logLine(t, buf, "requestID", id)
		proto := "HTTP/1.1"
		if h2 {
			proto = "HTTP/2.0"
		}
		if line["tlsVersion"] != "TLSv1.3" || line["sni"] != "a.example.com" || line["protocol"] != proto ||
			line["gateway"] != "ns/gw" || line["listener"] != "https" || line["route"] != "ns/secure" || line["upstreamStatus"] != 200.0 {
			t.Errorf("h2 %v: line %v", h2, line)
		}
	}
}

// Tests that requests the proxy refuses are logged with their status and reason, the client's
// address and a request ID: a head with too many fields (431), a target with userinfo (400),
// a route with no endpoints (503); and with the native engine, whose codec refuses malformed
// heads before any handler, a head with a space before a colon (400).
func TestAccessLogRecordsRefusals(t *testing.T) {
	t.Parallel()
	d, buf := logged(t, dataplane.Options{})
	apply(t, d,
		snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "", snaptest.Route("ns/empty/0/0", "", snaptest.Prefix("/"), "ns/empty:80"))),
		&discoveryv1.Cluster{Name: "ns/empty:80"})
	many := strings.Builder{}
	for i := range forward.DefaultMaxHeaderCount + 1 {
		fmt.Fprintf(&many, "X-H%d: v\r\n", i)
	}
	cases := []struct {
		name, head string
		status     int
		reason     string
	}{
		{"too many header fields", "GET /a HTTP/1.1\r\nHost: x\r\n" + many.String() + "\r\n", 431, "too_many_headers"},
		{"userinfo in the target", "GET http://user@x/b HTTP/1.1\r\nHost: x\r\n\r\n", 400, ""},
		{"no endpoints", "GET /c HTTP/1.1\r\nHost: x\r\n\r\n", 503, "no_endpoints"},
	}
	if engine == http1.EngineNative {
		cases = append(cases, struct {
			name, head string
			status     int
			reason     string
		}{"a space before a colon", "GET /d HTTP/1.1\r\nHost: x\r\nX-A : 1\r\n\r\n", 400, ""})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, br := rawConn(t, addr(t, d, 80))
			if resp, _ := roundTrip(t, c, br, tc.head); resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			line := logLine(t, buf, "clientPort", localPort(c))
			reason, _ := line["reason"].(string)
			id, _ := line["requestID"].(string)
			if line["status"] != float64(tc.status) || reason == "" || tc.reason != "" && reason != tc.reason ||
				line["clientAddress"] != "127.0.0.1" || !uuidV4.MatchString(id) || line["upstreamStatus"] != nil {
				t.Errorf("line %v", line)
			}
		})
	}
}

// blockedWriter blocks every Write until released.
type blockedWriter struct {
	entered, release chan struct{}
	once             sync.Once
}

func (w *blockedWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.entered) })
	<-w.release
	return len(p), nil
}

// Tests that an access log writer that blocks (a full pipe, a stalled disk) does not slow the
// request path: once it is stuck, requests are answered as before and the lines that do not fit
// the queue are dropped and counted in coxswain_proxy_access_log_dropped_total.
func TestBlockedAccessLogDropsLinesNotRequests(t *testing.T) {
	t.Parallel()
	app, _ := backend(t, "app")
	reg := prometheus.NewRegistry()
	w := &blockedWriter{entered: make(chan struct{}), release: make(chan struct{})}
	d := start(t, dataplane.Options{
		Registerer: reg, AccessLog: w,
		AccessLogOptions: accesslog.Options{QueueSize: 4, FlushInterval: time.Millisecond},
	})
	t.Cleanup(func() { close(w.release) }) // before the shutdown, which writes what is queued
	proxy := routeAll(t, d, hostPort(app))
	c, br := rawConn(t, proxy)
	if resp, _ := roundTrip(t, c, br, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	select {
	case <-w.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the writer was never called")
	}
	const n = 200
	start := time.Now()
	for range n {
		if resp, _ := roundTrip(t, c, br, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 200 {
			t.Fatalf("status %d with the writer blocked", resp.StatusCode)
		}
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("%d requests took %v with the writer blocked", n, took)
	}
	eventually(t, "the lines beyond the queue are counted", func() bool {
		return metricValue(t, reg, "coxswain_proxy_access_log_dropped_total", "") >= n-4
	})
	if got := metricValue(t, reg, "coxswain_proxy_access_log_dropped_total", ""); got > n {
		t.Errorf("dropped %v lines of %d requests", got, n)
	}
}

// Tests that the text format and a field selection reach the log of a real request.
func TestAccessLogTextFormat(t *testing.T) {
	t.Parallel()
	app, _ := backend(t, "app")
	fields, err := accesslog.ParseFields("requestID,status,route,upstreamStatus")
	if err != nil {
		t.Fatal(err)
	}
	var buf syncBuffer
	d := start(t, dataplane.Options{AccessLog: &buf, AccessLogOptions: accesslog.Options{
		Format: accesslog.FormatText, Fields: fields, FlushInterval: 5 * time.Millisecond,
	}})
	proxy := routeAll(t, d, hostPort(app))
	do(t, client(proxy), "GET", "http://x/", "X-Request-Id: text-1")
	eventually(t, "the text line is written", func() bool {
		return strings.Contains(buf.String(), "requestID=text-1 status=200 route=ns/r upstreamStatus=200\n")
	})
}
