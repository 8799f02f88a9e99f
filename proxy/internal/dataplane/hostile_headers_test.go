package dataplane_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// Tests that targets and hosts outside the HTTP grammar are refused before routing, over
// HTTP/1.1 and HTTP/2, and never reach the backend: an absolute-form target of another scheme
// than http or https, and a Host with two ports or a port that is not a number.
func TestTargetSchemeAndHostAreChecked(t *testing.T) {
	t.Parallel()
	be := newRawBackend(t, answerEach)
	d := start(t, dataplane.Options{})
	proxy := routeAll(t, d, be.addr())
	for _, tc := range []struct {
		name, raw string
		status    int
	}{
		{"an ftp absolute-form target", "GET ftp://x/file HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"a file absolute-form target", "GET file:///etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"a Host with two ports", "GET / HTTP/1.1\r\nHost: a.example:80:80\r\n\r\n", 400},
		{"a Host with a port that is no number", "GET / HTTP/1.1\r\nHost: a.example:http\r\n\r\n", 400},
		{"a Host of an IPv6 literal without brackets", "GET / HTTP/1.1\r\nHost: ::1\r\n\r\n", 400},
		{"an http absolute-form target", "GET http://a.example/ok HTTP/1.1\r\nHost: x\r\n\r\n", 200},
		{"an https absolute-form target", "GET https://a.example/ok HTTP/1.1\r\nHost: x\r\n\r\n", 200},
		{"a Host with a port", "GET /ok HTTP/1.1\r\nHost: a.example:8080\r\n\r\n", 200},
		{"a Host of an IPv6 literal with a port", "GET /ok HTTP/1.1\r\nHost: [::1]:80\r\n\r\n", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, br := rawConn(t, proxy)
			if resp, _ := roundTrip(t, c, br, tc.raw); resp.StatusCode != tc.status {
				t.Errorf("got %d, want %d", resp.StatusCode, tc.status)
			}
		})
	}
	h := dialH2(t, proxy)
	h.request(1, true, get("a.example:80:80", "/")...)
	if got := h.await(1); got.status != 400 {
		t.Errorf("HTTP/2 :authority with two ports: got %d (reset %v), want 400", got.status, got.reset)
	}
	h.request(3, true, get("x", "ftp://x/file")...)
	if got := h.await(3); got.status != 400 && !got.reset {
		t.Errorf("HTTP/2 :path of an ftp URL: got %d, want 400", got.status)
	}
	for _, got := range be.targets() {
		if got != "/ok" {
			t.Errorf("backend received %q", got)
		}
	}
}

// upgrader is a raw backend that records each request's Upgrade, answers an upgrade with a 101
// switching to the protocol its path names, and then echoes what it reads.
func upgrader(b *rawBackend, br *bufio.Reader, c net.Conn) {
	r, err := b.read(br)
	if err != nil {
		return
	}
	if r.Header.Get("Upgrade") == "" {
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nplain")
		return
	}
	proto := strings.TrimPrefix(r.URL.Path, "/")
	if _, err := fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", proto); err != nil {
		return
	}
	_, _ = io.Copy(c, br)
}

// Tests that the proxy asks a backend to upgrade to WebSocket only, whatever else the client's
// Upgrade lists, and opens a tunnel only on a 101 that switches to websocket: a backend that
// switches to another protocol gets no tunnel, and the client a 502.
func TestUpgradeIsWebSocketOnly(t *testing.T) {
	t.Parallel()
	be := newRawBackend(t, upgrader)
	d := start(t, dataplane.Options{})
	proxy := routeAll(t, d, be.addr())
	req := func(path string) string {
		return "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c, websocket, tls/1.3\r\n" +
			"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	}
	c, br := rawConn(t, proxy)
	if status := upgradeStatus(t, c, br, req("/h2c")); status != http.StatusBadGateway {
		t.Errorf("a 101 to h2c gave the client %d, want 502", status)
	}
	c, br = rawConn(t, proxy)
	if status := upgradeStatus(t, c, br, req("/websocket")); status != http.StatusSwitchingProtocols {
		t.Fatalf("a 101 to websocket gave the client %d", status)
	}
	if _, err := io.WriteString(c, "ping"); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "ping" {
		t.Errorf("tunnel echoed %q, %v", got, err)
	}
	for _, r := range be.requests() {
		if up := r.Header.Values("Upgrade"); len(up) != 1 || up[0] != "websocket" {
			t.Errorf("backend received Upgrade %q for %s, want websocket alone", up, r.URL.Path)
		}
	}
}

// Tests that on an HTTPS listener validating client certificates, the headers through which
// proxies pass a client certificate never reach the backend from the client: whatever the
// client claims there, with a valid certificate or under the insecure fallback without one.
func TestClientCertHeadersAreStrippedOnValidatingListeners(t *testing.T) {
	t.Parallel()
	app, _ := backend(t, "app")
	ca := newTestCA(t, "client-ca")
	server, _ := snaptest.Certificate(t, "ns/server", "app.example.com")
	d := start(t, dataplane.Options{})
	apply(t, d,
		validatedListener(t, "ns/strict", 443, "", ca, false, "ns/app:80"),
		validatedListener(t, "ns/fallback", 8443, "", ca, true, "ns/app:80"),
		server, snaptest.Cluster(t, "ns/app:80", hostPort(app)))
	valid := ca.clientLeaf(t, time.Now().Add(24*time.Hour), x509.ExtKeyUsageClientAuth)
	forged := []string{
		"X-Forwarded-Client-Cert: By=spiffe://cluster.local/ns/a/sa/admin;Hash=00;Subject=\"CN=admin\"",
		"X-SSL-Client-Verify: SUCCESS", "X-SSL-Client-S-DN: CN=admin", "x-ssl-client-cert: forged",
		"Client-Cert: :MIIB:", "Client-Cert-Chain: :MIIB:", "X-Client-Cert: forged", "X-ARR-ClientCert: forged",
	}
	for _, tc := range []struct {
		name string
		port uint32
		cert *tls.Certificate
	}{
		{"AllowValidOnly with a valid certificate", 443, valid},
		{"AllowInsecureFallback without a certificate", 8443, nil},
	} {
		for _, h2 := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s h2=%t", tc.name, h2), func(t *testing.T) {
				e := getEchoWithClientCert(t, addr(t, d, tc.port), tc.cert, h2, forged)
				for name := range e.Headers {
					if n := strings.ToLower(name); strings.Contains(n, "client-cert") || strings.HasPrefix(n, "x-ssl-client") || n == "x-arr-clientcert" {
						t.Errorf("backend received %s: %q", name, e.Headers[name])
					}
				}
				if e.URI != "/" {
					t.Errorf("backend saw %q", e.URI)
				}
			})
		}
	}
}

// getEchoWithClientCert sends GET https://app.example.com/ to addr with the headers, presenting
// cert (none when nil), and returns what the echo backend received.
func getEchoWithClientCert(t *testing.T, addr string, cert *tls.Certificate, h2 bool, headers []string) echo {
	t.Helper()
	cfg := &tls.Config{
		ServerName:         "app.example.com",
		InsecureSkipVerify: true, //nolint:gosec // the test is about the headers
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if cert == nil {
				return &tls.Certificate{}, nil
			}
			return cert, nil
		},
	}
	tr := &http.Transport{
		DialTLSContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&tls.Dialer{NetDialer: &net.Dialer{Timeout: 2 * time.Second}, Config: cfg}).DialContext(ctx, network, addr)
		},
		ForceAttemptHTTP2: h2,
	}
	if h2 {
		cfg.NextProtos = []string{"h2"}
	} else {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	t.Cleanup(tr.CloseIdleConnections)
	req, err := http.NewRequestWithContext(context.Background(), "GET", "https://app.example.com/", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Add(k, v)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second, Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if want := map[bool]int{false: 1, true: 2}[h2]; resp.ProtoMajor != want {
		t.Fatalf("spoke %s", resp.Proto)
	}
	var e echo
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	return e
}

// trailing is a raw backend that answers every request with a chunked body and the trailers
// X-Secret, X-Set and X-Keep (announced) and X-Late (not announced).
func trailing(b *rawBackend, br *bufio.Reader, c net.Conn) {
	for {
		if _, err := b.read(br); err != nil {
			return
		}
		_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nTrailer: X-Secret, X-Set, X-Keep\r\nTransfer-Encoding: chunked\r\n\r\n"+
			"2\r\nok\r\n0\r\nX-Secret: leaked\r\nX-Set: backend\r\nX-Keep: kept\r\nX-Late: late\r\n\r\n")
		if err != nil {
			return
		}
	}
}

// Tests that a route's and a backend's response header filters apply to the response's
// trailers too: a trailer of a field they remove, set or add never reaches the client, over
// HTTP/1.1 and HTTP/2, announced or not; other trailers are relayed.
func TestResponseTrailersFollowHeaderFilters(t *testing.T) {
	t.Parallel()
	be := newRawBackend(t, trailing)
	d := start(t, dataplane.Options{})
	proxy := routeAll(t, d, be.addr(), func(r *discoveryv1.Route) {
		r.Filters = []*discoveryv1.Filter{filter(&discoveryv1.Filter_ResponseHeaders{ResponseHeaders: &discoveryv1.HeaderModifier{
			Remove: []string{"X-Secret"}, Set: []*discoveryv1.Header{{Name: "X-Set", Value: "route"}},
		}})}
		r.Backends[0].Filters = []*discoveryv1.Filter{filter(&discoveryv1.Filter_ResponseHeaders{ResponseHeaders: &discoveryv1.HeaderModifier{
			Remove: []string{"x-late"},
		}})}
	})
	resp, err := client(proxy).Get("http://x/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if string(body) != "ok" || resp.Header.Get("X-Set") != "route" {
		t.Fatalf("HTTP/1.1: got %q with X-Set %q", body, resp.Header.Get("X-Set"))
	}
	for _, name := range []string{"X-Secret", "X-Set", "X-Late"} {
		if v, ok := resp.Trailer[name]; ok {
			t.Errorf("HTTP/1.1: trailer %s: %q reached the client", name, v)
		}
	}
	if got := resp.Trailer.Get("X-Keep"); got != "kept" {
		t.Errorf("HTTP/1.1: trailer X-Keep %q, want kept", got)
	}
	h := dialH2(t, proxy)
	h.request(1, true, get("x", "/")...)
	got := h.await(1)
	if got.status != 200 || string(got.body) != "ok" {
		t.Fatalf("HTTP/2: got %d %q", got.status, got.body)
	}
	for _, name := range []string{"x-secret", "x-set", "x-late"} {
		if v, ok := got.trailers[name]; ok {
			t.Errorf("HTTP/2: trailer %s: %q reached the client", name, v)
		}
	}
	if got.trailers["x-keep"] != "kept" {
		t.Errorf("HTTP/2: trailers %v, want x-keep", got.trailers)
	}
}

// Tests that an HTTP/2 request whose content-length disagrees with its DATA is answered as the
// client's error (RFC 9113 8.1.1), never as the proxy's: a 400 or a PROTOCOL_ERROR reset, not
// an INTERNAL_ERROR one, whether the body is absent, short or too long; and no backend reads a
// whole body the client did not send.
func TestHTTP2ContentLengthMismatchIsTheClientsError(t *testing.T) {
	t.Parallel()
	var whole atomic.Int64
	be := newRawBackend(t, func(b *rawBackend, br *bufio.Reader, c net.Conn) {
		for {
			r, err := b.read(br)
			if err != nil {
				return
			}
			if _, err := io.Copy(io.Discard, r.Body); err != nil {
				return // the body fell short: the proxy cut the connection
			}
			whole.Add(1)
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nread")
		}
	})
	d := start(t, dataplane.Options{})
	h := dialH2(t, routeAll(t, d, be.addr()))
	post := func(id uint32, length string, data string) streamOutcome {
		h.request(id, data == "", ":method", "POST", ":scheme", "http", ":authority", "x", ":path", "/", "content-length", length)
		if data != "" {
			if err := h.fr.WriteData(id, true, []byte(data)); err != nil {
				t.Fatal(err)
			}
		}
		return h.await(id)
	}
	for i, tc := range []struct {
		name         string
		length, data string
	}{
		{"no body", "40", ""},
		{"a short body", "10", "abc"},
		{"a long body", "2", "abcdef"},
	} {
		got := post(uint32(2*i+1), tc.length, tc.data)
		t.Logf("%s: status %d, reset %t (%v)", tc.name, got.status, got.reset, got.code)
		switch {
		case got.reset && got.code != http2.ErrCodeProtocol:
			t.Errorf("%s: reset with %v, want 400 or PROTOCOL_ERROR", tc.name, got.code)
		case !got.reset && got.status != 400:
			t.Errorf("%s: got %d, want 400 or a PROTOCOL_ERROR reset", tc.name, got.status)
		}
	}
	if n := whole.Load(); n != 0 {
		t.Errorf("backend read %d whole bodies the client never sent", n)
	}
}

// Tests that a client may not announce a client certificate header as a trailer, where it
// would reach the backend past the stripping of validating listeners: 400 on any listener.
func TestClientCertTrailerIsRefused(t *testing.T) {
	t.Parallel()
	be := newRawBackend(t, answerEach)
	d := start(t, dataplane.Options{})
	proxy := routeAll(t, d, be.addr())
	for _, trailer := range []string{"X-Forwarded-Client-Cert", "x-ssl-client-verify", "Client-Cert"} {
		c, br := rawConn(t, proxy)
		resp, _ := roundTrip(t, c, br, "POST / HTTP/1.1\r\nHost: x\r\nTrailer: "+trailer+"\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n"+trailer+": forged\r\n\r\n")
		if resp.StatusCode != 400 {
			t.Errorf("Trailer: %s got %d, want 400", trailer, resp.StatusCode)
		}
	}
	if got := be.requests(); len(got) != 0 {
		t.Errorf("backend received %d requests", len(got))
	}
}
