package dataplane_test

import (
	"crypto/tls"
	"sync/atomic"
	"testing"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// Tests HTTPS termination: the certificate chosen by SNI (exact hostname, then wildcard, then
// the listener's default), HTTP/2 through ALPN, and HTTP/1.1 for clients that ask for it.
func TestHTTPS(t *testing.T) {
	t.Parallel()
	app, _ := backend(t, "app")
	exactCert, exactLeaf := snaptest.Certificate(t, "ns/exact", "a.example.com")
	wildCert, wildLeaf := snaptest.Certificate(t, "ns/wild", "*.example.com")
	defaultCert, defaultLeaf := snaptest.Certificate(t, "ns/default", "default.test")
	vhost := func(name, hostname, cert string) *discoveryv1.VirtualHost {
		vh := snaptest.VHost(name, hostname, snaptest.Route("ns/"+name+"/0/0", hostname, snaptest.Prefix("/"), "ns/app:80"))
		vh.Certificates = []string{cert}
		return vh
	}
	d := start(t, dataplane.Options{})
	apply(t, d,
		snaptest.Listener("ns/gw", 443, discoveryv1.Protocol_PROTOCOL_HTTPS,
			vhost("exact", "a.example.com", "ns/exact"), vhost("wild", "*.example.com", "ns/wild"), vhost("any", "", "ns/default")),
		exactCert, wildCert, defaultCert, snaptest.Cluster(t, "ns/app:80", hostPort(app)),
	)
	proxy := addr(t, d, 443)
	cases := []struct {
		name, host string
		h2         bool
		leaf       []byte
		proto      string
	}{
		{"an exact server name gets its certificate over HTTP/2", "a.example.com", true, exactLeaf.Raw, "h2"},
		{"a server name under a wildcard gets the wildcard certificate", "b.example.com", true, wildLeaf.Raw, "h2"},
		{"an unknown server name gets the listener's default certificate", "other.test", true, defaultLeaf.Raw, "h2"},
		{"a client offering only http/1.1 is served HTTP/1.1", "a.example.com", false, exactLeaf.Raw, "http/1.1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var served atomic.Pointer[tls.ConnectionState]
			c := tlsClient(proxy, tc.h2, &served)
			r := do(t, c, "GET", "https://"+tc.host+"/x?y=1")
			st := served.Load()
			if r.status != 200 || st == nil {
				t.Fatalf("got %d %s", r.status, r.body)
			}
			if string(st.PeerCertificates[0].Raw) != string(tc.leaf) {
				t.Errorf("served %s, want another certificate", st.PeerCertificates[0].Subject)
			}
			if st.NegotiatedProtocol != tc.proto || st.Version < tls.VersionTLS12 {
				t.Errorf("negotiated %q version %x", st.NegotiatedProtocol, st.Version)
			}
			if r.echo.Host != tc.host || r.echo.URI != "/x?y=1" || r.echo.Headers["X-Forwarded-Proto"][0] != "https" {
				t.Errorf("backend saw %+v", r.echo)
			}
		})
	}
}

// Tests that TLS 1.1 and older is refused.
func TestHTTPSRefusesOldTLS(t *testing.T) {
	t.Parallel()
	cert, _ := snaptest.Certificate(t, "ns/cert", "a.example.com")
	d := start(t, dataplane.Options{})
	vh := snaptest.VHost("https", "")
	vh.Certificates = []string{"ns/cert"}
	apply(t, d, snaptest.Listener("ns/gw", 443, discoveryv1.Protocol_PROTOCOL_HTTPS, vh), cert)
	conn, err := tls.Dial("tcp", addr(t, d, 443), &tls.Config{
		InsecureSkipVerify: true, //nolint:gosec // only the version matters here
		MaxVersion:         tls.VersionTLS11,
	})
	if err == nil {
		_ = conn.Close()
		t.Fatal("a TLS 1.1 handshake succeeded")
	}
}
