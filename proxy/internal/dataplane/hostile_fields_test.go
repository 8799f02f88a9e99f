package dataplane_test

import (
	"bufio"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http2"

	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/forward"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// normalName is a field name as CGI and most frameworks see it: case and '_' against '-' do
// not tell names apart.
func normalName(name string) string { return strings.ReplaceAll(strings.ToLower(name), "_", "-") }

// certClaims are fields through which proxies other than ours pass a client certificate, as a
// client forging them would spell them.
var certClaims = []string{
	"X_ssl_client_verify: SUCCESS", "Ssl-Client-Verify: SUCCESS", "X-Client-Verify: SUCCESS",
	"X-Client-Dn: CN=admin", "X-Forwarded-Tls-Client-Cert: MIIB", "Cert-Subject: CN=admin",
}

// Tests that on an HTTPS listener validating client certificates, the client certificate
// fields reach the backend under no spelling: not with an underscore for a dash, which CGI and
// the frameworks built on its variables read as the dashed name, nor under the names of other
// proxies (nginx's ssl_client_*, Traefik's X-Forwarded-Tls-Client-Cert, X-Client-*, Cert-*),
// whether fields with underscores are dropped (the default) or allowed.
func TestClientCertClaimsAreStrippedByNormalName(t *testing.T) {
	t.Parallel()
	app, _ := backend(t, "app")
	ca := newTestCA(t, "client-ca")
	valid := ca.clientLeaf(t, time.Now().Add(24*time.Hour), x509.ExtKeyUsageClientAuth)
	for _, allow := range []bool{false, true} {
		server, _ := snaptest.Certificate(t, "ns/server", "app.example.com")
		d := start(t, dataplane.Options{Forward: forward.Options{AllowUnderscoresInHeaders: allow}})
		apply(t, d, validatedListener(t, "ns/strict", 443, "", ca, false, "ns/app:80"), server,
			snaptest.Cluster(t, "ns/app:80", hostPort(app)))
		for _, h2 := range []bool{false, true} {
			t.Run(fmt.Sprintf("underscores allowed %t h2=%t", allow, h2), func(t *testing.T) {
				e := getEchoWithClientCert(t, addr(t, d, 443), valid, h2, append([]string{"X-Kept: 1"}, certClaims...))
				for name, vs := range e.Headers {
					for _, claim := range certClaims {
						if claimed, _, _ := strings.Cut(claim, ":"); normalName(name) == normalName(claimed) {
							t.Errorf("backend received %s: %q", name, vs)
						}
					}
				}
				if e.Headers["X-Kept"] == nil {
					t.Errorf("backend did not receive X-Kept: %v", e.Headers)
				}
			})
		}
	}
}

// Tests that a request field whose name holds an underscore is dropped by default, over
// HTTP/1.1 and HTTP/2 (nginx's underscores_in_headers off): a backend reading CGI variables
// or a framework's normalized names takes X_Auth_User for X-Auth-User, which a route's filter
// or the backend's own proxy may have meant to control. AllowUnderscoresInHeaders forwards it.
func TestFieldsWithUnderscoresAreDropped(t *testing.T) {
	t.Parallel()
	app, _ := backend(t, "app")
	for _, allow := range []bool{false, true} {
		reg := prometheus.NewRegistry()
		d := start(t, dataplane.Options{Registerer: reg, Forward: forward.Options{AllowUnderscoresInHeaders: allow}})
		proxy := routeAll(t, d, hostPort(app))
		// Each request below sends two fields with underscores: dropped and counted, or neither.
		dropped := func(t *testing.T, want float64) {
			t.Helper()
			if allow {
				want = 0
			}
			if got := metricValue(t, reg, "coxswain_proxy_dropped_request_fields_total", "underscore"); got != want {
				t.Errorf("coxswain_proxy_dropped_request_fields_total{reason=\"underscore\"} = %v, want %v", got, want)
			}
		}
		t.Run(fmt.Sprintf("HTTP/1.1 underscores allowed %t", allow), func(t *testing.T) {
			c, br := rawConn(t, proxy)
			resp, body := roundTrip(t, c, br, "GET / HTTP/1.1\r\nHost: x\r\nX_Auth_User: admin\r\nx_tenant: red\r\nX-Kept: 1\r\n\r\n")
			if resp.StatusCode != 200 {
				t.Fatalf("got %d: %s", resp.StatusCode, body)
			}
			var e echo
			decodeEcho(t, body, &e)
			checkUnderscores(t, e, allow)
			dropped(t, 2)
		})
		t.Run(fmt.Sprintf("HTTP/2 underscores allowed %t", allow), func(t *testing.T) {
			h := dialH2(t, proxy)
			h.request(1, true, get("x", "/", "x_auth_user", "admin", "x_tenant", "red", "x-kept", "1")...)
			got := h.await(1)
			if got.status != 200 {
				t.Fatalf("got %d (reset %v)", got.status, got.reset)
			}
			var e echo
			decodeEcho(t, string(got.body), &e)
			checkUnderscores(t, e, allow)
			dropped(t, 4)
		})
	}
}

func checkUnderscores(t *testing.T, e echo, allowed bool) {
	t.Helper()
	n := 0
	for name := range e.Headers {
		if strings.Contains(name, "_") {
			n++
			if !allowed {
				t.Errorf("backend received %s: %q", name, e.Headers[name])
			}
		}
	}
	if allowed && n != 2 {
		t.Errorf("backend received %d fields with underscores, want 2: %v", n, e.Headers)
	}
	if e.Headers["X-Kept"] == nil {
		t.Errorf("backend did not receive X-Kept: %v", e.Headers)
	}
}

// Tests that the forwarding fields a backend reads for the client's address, scheme, host and
// port carry the proxy's values and never the client's, over HTTP/1.1 and HTTP/2: Forwarded
// (RFC 7239), X-Forwarded-Host, X-Forwarded-Port, X-Real-IP and X-Forwarded-Proto are set from
// the connection, the listener and the request's Host, whatever the client sent in them.
func TestForwardingFieldsAreTheProxys(t *testing.T) {
	t.Parallel()
	app, _ := backend(t, "app")
	d := start(t, dataplane.Options{})
	proxy := routeAll(t, d, hostPort(app))
	forged := []string{
		"Forwarded", "for=10.9.9.9;host=admin.internal;proto=https", "X-Forwarded-Host", "admin.internal",
		"X-Forwarded-Port", "8443", "X-Real-IP", "10.9.9.9", "X-Forwarded-Proto", "https",
	}
	want := map[string]string{
		"Forwarded":         `for=127.0.0.1;host="app.example:8080";proto=http`,
		"X-Forwarded-Host":  "app.example:8080",
		"X-Forwarded-Port":  "80",
		"X-Real-Ip":         "127.0.0.1",
		"X-Forwarded-Proto": "http",
	}
	check := func(t *testing.T, e echo) {
		t.Helper()
		for name, v := range want {
			if got := e.Headers[name]; len(got) != 1 || got[0] != v {
				t.Errorf("backend received %s %q, want %q", name, got, v)
			}
		}
	}
	t.Run("HTTP/1.1", func(t *testing.T) {
		raw := "GET / HTTP/1.1\r\nHost: app.example:8080\r\n"
		for i := 0; i < len(forged); i += 2 {
			raw += forged[i] + ": " + forged[i+1] + "\r\n"
		}
		c, br := rawConn(t, proxy)
		resp, body := roundTrip(t, c, br, raw+"\r\n")
		if resp.StatusCode != 200 {
			t.Fatalf("got %d: %s", resp.StatusCode, body)
		}
		var e echo
		decodeEcho(t, body, &e)
		check(t, e)
	})
	t.Run("HTTP/2", func(t *testing.T) {
		h := dialH2(t, proxy)
		pairs := get("app.example:8080", "/")
		for i := 0; i < len(forged); i += 2 {
			pairs = append(pairs, strings.ToLower(forged[i]), forged[i+1])
		}
		h.request(1, true, pairs...)
		got := h.await(1)
		if got.status != 200 {
			t.Fatalf("got %d (reset %v)", got.status, got.reset)
		}
		var e echo
		decodeEcho(t, string(got.body), &e)
		check(t, e)
	})
}

// earlyHints is a raw backend that answers every request with a 103 Early Hints, then 200.
func earlyHints(b *rawBackend, br *bufio.Reader, c net.Conn) {
	for {
		if _, err := b.read(br); err != nil {
			return
		}
		if _, err := io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n"+
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
			return
		}
	}
}

// Tests that a 1xx response is never relayed to an HTTP/1.0 client, which RFC 9110 15.2
// forbids (it would take the 103 for the final response and the 200 for garbage), while an
// HTTP/1.1 client still gets the backend's 103 Early Hints before its 200.
func TestInformationalIsNotRelayedToHTTP10(t *testing.T) {
	t.Parallel()
	be := newRawBackend(t, earlyHints)
	d := start(t, dataplane.Options{})
	proxy := routeAll(t, d, be.addr())
	for _, tc := range []struct {
		name, raw string
		hints     bool
	}{
		{"HTTP/1.0", "GET / HTTP/1.0\r\nHost: x\r\n\r\n", false},
		{"HTTP/1.0 keep-alive", "GET / HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n", false},
		{"HTTP/1.1", "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, br := rawConn(t, proxy)
			if _, err := io.WriteString(c, tc.raw); err != nil {
				t.Fatal(err)
			}
			first, err := br.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			switch got := strings.TrimSpace(first); {
			case tc.hints && !strings.HasPrefix(got, "HTTP/1.1 103 "):
				t.Errorf("first status line %q, want the 103", got)
			case !tc.hints && !strings.HasPrefix(got, "HTTP/1.") || !tc.hints && !strings.Contains(got, " 200 "):
				t.Errorf("first status line %q, want the 200", got)
			}
		})
	}
}

// trailerNames is a raw backend that reads each request's body to its end and answers with
// the names of the trailers that came with it, sorted.
func trailerNames(b *rawBackend, br *bufio.Reader, c net.Conn) {
	for {
		r, err := b.read(br)
		if err != nil {
			return
		}
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
		var names []string
		for name := range r.Trailer {
			if r.Trailer.Get(name) != "" {
				names = append(names, name)
			}
		}
		slices.Sort(names)
		body := strings.Join(names, ",")
		if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
			return
		}
	}
}

// Tests that request trailers whose names hold an underscore are dropped as such fields are,
// over HTTP/1.1 and HTTP/2, while others reach the backend; AllowUnderscoresInHeaders
// forwards them.
func TestTrailersWithUnderscoresAreDropped(t *testing.T) {
	t.Parallel()
	be := newRawBackend(t, trailerNames)
	for _, allow := range []bool{false, true} {
		d := start(t, dataplane.Options{Forward: forward.Options{AllowUnderscoresInHeaders: allow}})
		proxy := routeAll(t, d, be.addr())
		check := func(proto string, status int, got string) {
			t.Helper()
			if status != 200 || !strings.Contains(got, "X-Kept") || strings.Contains(got, "_") != allow {
				t.Errorf("%s, underscores allowed %t: got %d, backend received trailers %q", proto, allow, status, got)
			}
		}
		c, br := rawConn(t, proxy)
		resp, body := roundTrip(t, c, br, "POST / HTTP/1.1\r\nHost: x\r\nTrailer: X_Secret, X-Kept\r\nTransfer-Encoding: chunked\r\n\r\n"+
			"2\r\nhi\r\n0\r\nX_Secret: 1\r\nX-Kept: 1\r\n\r\n")
		check("HTTP/1.1", resp.StatusCode, body)
		h := dialH2(t, proxy)
		h.request(1, false, ":method", "POST", ":scheme", "http", ":authority", "x", ":path", "/", "trailer", "x_secret, x-kept")
		if err := h.fr.WriteData(1, false, []byte("hi")); err != nil {
			t.Fatal(err)
		}
		if err := h.fr.WriteHeaders(http2.HeadersFrameParam{
			StreamID: 1, BlockFragment: h.headerBlock("x_secret", "1", "x-kept", "1"), EndStream: true, EndHeaders: true,
		}); err != nil {
			t.Fatal(err)
		}
		got := h.await(1)
		check("HTTP/2", got.status, string(got.body))
	}
}
