package dataplane_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// misdirectedPlane serves, on port 443, the listeners of the Gateway API conformance test
// HTTPRouteHTTPSListenerDetectMisdirectedRequests, all with one certificate: a catch-all whose
// route takes example.org only (backend v1), second-example.org (v2), *.wildcard.org (v3) and
// fourth-example.wildcard.org (v4). Port 8443 has no catch-all: a.example.com (a) and
// *.example.com (wild). It returns the proxy's two addresses.
func misdirectedPlane(t *testing.T, opts dataplane.Options) (https, noCatchAll string) {
	t.Helper()
	cert, _ := snaptest.Certificate(t, "ns/shared", "*", "*.org", "*.wildcard.org", "*.example.com", "a.example.com")
	var clusters []*discoveryv1.Cluster
	vhost := func(name, hostname, routeHost, backendName string) *discoveryv1.VirtualHost {
		srv, _ := backend(t, backendName)
		cluster := "ns/" + backendName + ":80"
		clusters = append(clusters, snaptest.Cluster(t, cluster, hostPort(srv)))
		vh := snaptest.VHost(name, hostname, snaptest.Route("ns/"+name+"/0/0", routeHost, snaptest.Prefix("/detect"), cluster))
		vh.Certificates = []string{"ns/shared"}
		return vh
	}
	d := start(t, opts)
	msgs := []proto.Message{
		snaptest.Listener("ns/gw", 443, discoveryv1.Protocol_PROTOCOL_HTTPS,
			vhost("https", "", "example.org", "v1"),
			vhost("https-with-hostname", "second-example.org", "second-example.org", "v2"),
			vhost("https-with-wildcard-hostname", "*.wildcard.org", "*.wildcard.org", "v3"),
			vhost("https-with-hostname-matching-wildcard", "fourth-example.wildcard.org", "fourth-example.wildcard.org", "v4")),
		snaptest.Listener("ns/gw", 8443, discoveryv1.Protocol_PROTOCOL_HTTPS,
			vhost("exact", "a.example.com", "a.example.com", "a"),
			vhost("wild", "*.example.com", "*.example.com", "wild")),
		cert,
	}
	for _, c := range clusters {
		msgs = append(msgs, c)
	}
	apply(t, d, msgs...)
	return addr(t, d, 443), addr(t, d, 8443)
}

// tlsConn opens a TLS connection to addr sending serverName as SNI (none when empty) and
// offering only proto through ALPN.
func tlsConn(t *testing.T, addr, serverName, proto string) *tls.Conn {
	t.Helper()
	d := &tls.Dialer{
		NetDialer: &net.Dialer{Timeout: 2 * time.Second},
		Config: &tls.Config{
			ServerName:         serverName,
			InsecureSkipVerify: true, //nolint:gosec // one certificate covers every name; the test is about routing
			NextProtos:         []string{proto},
		},
	}
	c, err := d.DialContext(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatalf("handshake with server name %q: %v", serverName, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	tc := c.(*tls.Conn)
	if got := tc.ConnectionState().NegotiatedProtocol; got != proto {
		t.Fatalf("negotiated %q, want %q", got, proto)
	}
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	return tc
}

// answer is what the proxy said to one request on a misdirection test connection.
type answer struct {
	status  int
	backend string
	// close says the response announced the end of the connection.
	close bool
}

// misdirectedClient sends requests on one TLS connection, over HTTP/2 or HTTP/1.1.
type misdirectedClient struct {
	t  *testing.T
	h2 *http.ClientConn
	c  net.Conn
	br *bufio.Reader
}

func dialMisdirected(t *testing.T, addr, serverName string, h2 bool) *misdirectedClient {
	t.Helper()
	if !h2 {
		c := tlsConn(t, addr, serverName, "http/1.1")
		return &misdirectedClient{t: t, c: c, br: bufio.NewReader(c)}
	}
	conn := tlsConn(t, addr, serverName, "h2")
	var protocols http.Protocols
	protocols.SetHTTP2(true)
	tr := &http.Transport{
		Protocols:      &protocols,
		DialTLSContext: func(context.Context, string, string) (net.Conn, error) { return conn, nil },
	}
	cc, err := tr.NewClientConn(context.Background(), "https", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return &misdirectedClient{t: t, h2: cc}
}

// get sends GET /detect with host as the Host (HTTP/1.1) or :authority (HTTP/2).
func (m *misdirectedClient) get(host string) answer {
	m.t.Helper()
	if m.h2 == nil {
		resp, body := roundTrip(m.t, m.c, m.br, "GET /detect HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
		return answer{status: resp.StatusCode, backend: backendOf(body), close: resp.Close}
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "https://"+host+"/detect", nil)
	if err != nil {
		m.t.Fatal(err)
	}
	resp, err := m.h2.RoundTrip(req)
	if err != nil {
		m.t.Fatalf("GET %s: %v", host, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.ProtoMajor != 2 {
		m.t.Fatalf("GET %s answered over %s, want HTTP/2", host, resp.Proto)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		m.t.Fatal(err)
	}
	return answer{status: resp.StatusCode, backend: backendOf(string(body)), close: resp.Close}
}

func backendOf(body string) string {
	var e echo
	_ = json.Unmarshal([]byte(body), &e)
	return e.Backend
}

// Tests that an HTTPS request whose Host or :authority selects another listener than the
// handshake's server name gets 421, over HTTP/2 and HTTP/1.1: the cases of the Gateway API
// conformance test, then a port's Host, no server name, and a port without a catch-all.
func TestMisdirectedRequests(t *testing.T) {
	t.Parallel()
	https, noCatchAll := misdirectedPlane(t, dataplane.Options{})
	cases := []struct {
		name            string
		addr, sni, host string
		status          int
		backend         string
	}{
		{"the catch-all's name is served there", https, "example.org", "example.org", 200, "v1"},
		{"the catch-all's connection refuses an exact listener's host", https, "example.org", "second-example.org", 421, ""},
		{"the catch-all's connection answers its own unrouted host with 404", https, "example.org", "unknown-example.org", 404, ""},
		{"an exact listener's name is served there", https, "second-example.org", "second-example.org", 200, "v2"},
		{"an exact listener's connection refuses the catch-all's routed host", https, "second-example.org", "example.org", 421, ""},
		{"an exact listener's connection refuses the catch-all's unrouted host", https, "second-example.org", "unknown-example.org", 421, ""},
		{"a wildcard listener's name is served there", https, "third-example.wildcard.org", "third-example.wildcard.org", 200, "v3"},
		{"a wildcard listener's connection serves another name under the wildcard", https, "third-example.wildcard.org", "fith-example.wildcard.org", 200, "v3"},
		{"a wildcard listener's connection refuses a more specific exact listener's host", https, "third-example.wildcard.org", "fourth-example.wildcard.org", 421, ""},
		{"a wildcard listener's connection refuses another exact listener's host", https, "third-example.wildcard.org", "second-example.org", 421, ""},
		{"a wildcard listener's connection refuses the catch-all's host", https, "third-example.wildcard.org", "unknown-example.org", 421, ""},
		{"an exact listener under a wildcard serves its name", https, "fourth-example.wildcard.org", "fourth-example.wildcard.org", 200, "v4"},
		{"an exact listener under a wildcard refuses the wildcard's host", https, "fourth-example.wildcard.org", "fith-example.wildcard.org", 421, ""},
		{"an unknown server name is the catch-all's, which serves its host", https, "unknown-example.org", "example.org", 200, "v1"},
		{"an unknown server name is the catch-all's, which answers an unrouted host with 404", https, "unknown-example.org", "unknown-example.org", 404, ""},

		{"the Host's port is ignored when it selects the connection's listener", https, "second-example.org", "second-example.org:443", 200, "v2"},
		{"the Host's port is ignored when it selects another listener", https, "second-example.org", "example.org:8443", 421, ""},
		{"the Host's case is ignored", https, "second-example.org", "Second-Example.ORG", 200, "v2"},
		{"no server name selects the catch-all, which serves its host", https, "", "example.org", 200, "v1"},
		{"no server name selects the catch-all, whose connection refuses an exact listener's host", https, "", "second-example.org", 421, ""},
		{"no server name selects the catch-all, whose connection refuses a wildcard listener's host", https, "", "x.wildcard.org", 421, ""},

		{"without a catch-all an exact listener's name is served there", noCatchAll, "a.example.com", "a.example.com", 200, "a"},
		{"without a catch-all an exact listener's connection refuses the wildcard's host", noCatchAll, "a.example.com", "b.example.com", 421, ""},
		{"without a catch-all a wildcard listener's connection refuses the exact listener's host", noCatchAll, "b.example.com", "a.example.com", 421, ""},
		{"a host no listener serves is 404 whatever the server name", noCatchAll, "a.example.com", "other.test", 404, ""},
		{"a server name no listener serves selects none, so every listener's host is misdirected", noCatchAll, "other.test", "a.example.com", 421, ""},
		{"without a catch-all no server name selects no listener, so every listener's host is misdirected", noCatchAll, "", "a.example.com", 421, ""},
	}
	for _, proto := range []string{"h2", "http/1.1"} {
		for _, tc := range cases {
			t.Run(proto+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				got := dialMisdirected(t, tc.addr, tc.sni, proto == "h2").get(tc.host)
				if got.status != tc.status || got.backend != tc.backend {
					t.Errorf("server name %q, host %q: got %d from %q, want %d from %q", tc.sni, tc.host, got.status, got.backend, tc.status, tc.backend)
				}
				if got.status == http.StatusMisdirectedRequest && got.close {
					t.Errorf("421 announced Connection: close")
				}
			})
		}
	}
}

// Tests that a connection goes on serving its listener after a 421, on HTTP/2 and HTTP/1.1,
// and that the 421 is counted and logged with its reason.
func TestMisdirectedRequestKeepsConnection(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	var logged syncBuffer
	https, _ := misdirectedPlane(t, dataplane.Options{Registerer: reg, AccessLog: &logged})
	for i, h2 := range []bool{true, false} {
		c := dialMisdirected(t, https, "second-example.org", h2)
		if got := c.get("example.org"); got.status != http.StatusMisdirectedRequest || got.close {
			t.Fatalf("h2 %v: misdirected request got %d (close %v), want 421 keeping the connection", h2, got.status, got.close)
		}
		if got := c.get("second-example.org"); got.status != 200 || got.backend != "v2" {
			t.Fatalf("h2 %v: request after the 421 on the same connection got %d from %q, want 200 from v2", h2, got.status, got.backend)
		}
		want := float64(i + 1)
		eventually(t, fmt.Sprintf("%v misdirected requests are counted", want), func() bool {
			return metricValue(t, reg, "coxswain_proxy_refused_requests_total", "misdirected_request") == want
		})
	}
	eventually(t, "both 421s are logged with their reason", func() bool {
		n := 0
		for line := range strings.Lines(logged.String()) {
			if strings.Contains(line, `"status":421`) && strings.Contains(line, `"reason":"misdirected_request"`) && strings.Contains(line, `"host":"example.org"`) {
				n++
			}
		}
		return n == 2
	})
}
