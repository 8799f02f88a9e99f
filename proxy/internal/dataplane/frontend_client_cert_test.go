package dataplane_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// clientLeaf returns a client certificate of ca valid until notAfter with the extended key
// usage eku.
func (ca *testCA) clientLeaf(t *testing.T, notAfter time.Time, eku x509.ExtKeyUsage) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "client"},
		NotBefore:    time.Now().Add(-48 * time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{eku},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// validatedListener is an HTTPS listener of gateway gw on port serving host with the server
// certificate "ns/server", validating client certificates against ca unless ca is nil.
func validatedListener(t *testing.T, gw string, port uint32, host string, ca *testCA, fallback bool, cluster string) *discoveryv1.Listener {
	t.Helper()
	vh := snaptest.VHost(gw+"-https", host, snaptest.Route(gw+"/app/0/0", host, snaptest.Prefix("/"), cluster))
	vh.Certificates = []string{"ns/server"}
	l := snaptest.Listener(gw, port, discoveryv1.Protocol_PROTOCOL_HTTPS, vh)
	if ca != nil {
		l.ClientValidation = &discoveryv1.ClientValidation{CaCertificatesPem: ca.pem, InsecureFallback: fallback}
	}
	return l
}

// clientCertResult is what a request presenting a client certificate met.
type clientCertResult struct {
	status int
	err    error
	// asked says whether the proxy asked for a client certificate.
	asked bool
}

// getWithClientCert sends GET https://<serverName>/ to addr over a fresh connection,
// presenting cert (none when nil) if asked, with TLS at most maxVersion (any when zero).
func getWithClientCert(addr, serverName, host string, cert *tls.Certificate, maxVersion uint16) clientCertResult {
	var asked atomic.Bool
	cfg := &tls.Config{
		ServerName:         serverName,
		InsecureSkipVerify: true, //nolint:gosec // the test is about the client's certificate
		MaxVersion:         maxVersion,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			asked.Store(true)
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
		ForceAttemptHTTP2: true,
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Timeout: 5 * time.Second, Transport: tr}
	req, err := http.NewRequestWithContext(context.Background(), "GET", "https://"+host+"/", nil)
	if err != nil {
		return clientCertResult{err: err}
	}
	resp, err := c.Do(req)
	if err != nil {
		return clientCertResult{err: err, asked: asked.Load()}
	}
	_ = resp.Body.Close()
	return clientCertResult{status: resp.StatusCode, asked: asked.Load()}
}

// Tests client certificate validation on HTTPS listeners, trying the rejections first: with
// AllowValidOnly a handshake without a certificate, with one of another CA, an expired one or
// one not meant for client authentication fails (TLS 1.3 and 1.2); with AllowInsecureFallback
// every client is asked for a certificate and let through; a listener without validation asks
// for none.
func TestFrontendClientCertificateValidation(t *testing.T) {
	t.Parallel()
	app, _ := backend(t, "app")
	ca, other := newTestCA(t, "client-ca"), newTestCA(t, "other-ca")
	server, _ := snaptest.Certificate(t, "ns/server", "app.example.com")
	cluster := snaptest.Cluster(t, "ns/app:80", hostPort(app))
	d := start(t, dataplane.Options{})
	apply(t, d,
		validatedListener(t, "ns/strict", 443, "", ca, false, "ns/app:80"),
		validatedListener(t, "ns/fallback", 8443, "", ca, true, "ns/app:80"),
		validatedListener(t, "ns/open", 9443, "", nil, false, "ns/app:80"),
		server, cluster)
	strict, fallback, open := addr(t, d, 443), addr(t, d, 8443), addr(t, d, 9443)
	day := time.Now().Add(24 * time.Hour)
	valid := ca.clientLeaf(t, day, x509.ExtKeyUsageClientAuth)
	fromOther := other.clientLeaf(t, day, x509.ExtKeyUsageClientAuth)
	expired := ca.clientLeaf(t, time.Now().Add(-time.Hour), x509.ExtKeyUsageClientAuth)
	serverOnly := ca.clientLeaf(t, day, x509.ExtKeyUsageServerAuth)
	cases := []struct {
		name       string
		addr       string
		cert       *tls.Certificate
		maxVersion uint16
		pass       bool
		asked      bool
	}{
		{"AllowValidOnly refuses a client without a certificate", strict, nil, 0, false, true},
		{"AllowValidOnly refuses a client without a certificate over TLS 1.2", strict, nil, tls.VersionTLS12, false, true},
		{"AllowValidOnly refuses a certificate of another CA", strict, fromOther, 0, false, true},
		{"AllowValidOnly refuses an expired certificate of the CA", strict, expired, 0, false, true},
		{"AllowValidOnly refuses a certificate of the CA not meant for client authentication", strict, serverOnly, tls.VersionTLS12, false, true},
		{"AllowValidOnly serves a valid certificate", strict, valid, 0, true, true},
		{"AllowValidOnly serves a valid certificate over TLS 1.2", strict, valid, tls.VersionTLS12, true, true},
		{"AllowInsecureFallback serves a client without a certificate", fallback, nil, 0, true, true},
		{"AllowInsecureFallback serves a certificate of another CA", fallback, fromOther, 0, true, true},
		{"AllowInsecureFallback serves an expired certificate", fallback, expired, 0, true, true},
		{"AllowInsecureFallback serves a valid certificate", fallback, valid, 0, true, true},
		{"a listener without validation asks for no certificate", open, nil, 0, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := getWithClientCert(tc.addr, "app.example.com", "app.example.com", tc.cert, tc.maxVersion)
			if tc.pass && (got.err != nil || got.status != http.StatusOK) {
				t.Fatalf("got %d, %v; want 200", got.status, got.err)
			}
			if !tc.pass && got.err == nil {
				t.Fatalf("got %d; want the handshake to fail", got.status)
			}
			if got.asked != tc.asked {
				t.Errorf("proxy asked for a client certificate: %t, want %t", got.asked, tc.asked)
			}
		})
	}
}

// Tests that validation follows the table: once a listener trusts another CA, a new
// connection with a certificate of the old CA fails and one of the new CA passes.
func TestFrontendClientCertificateValidationFollowsTable(t *testing.T) {
	t.Parallel()
	app, _ := backend(t, "app")
	oldCA, newCA := newTestCA(t, "old-ca"), newTestCA(t, "new-ca")
	server, _ := snaptest.Certificate(t, "ns/server", "app.example.com")
	cluster := snaptest.Cluster(t, "ns/app:80", hostPort(app))
	d := start(t, dataplane.Options{})
	apply(t, d, validatedListener(t, "ns/gw", 443, "", oldCA, false, "ns/app:80"), server, cluster)
	proxy := addr(t, d, 443)
	day := time.Now().Add(24 * time.Hour)
	oldCert, newCert := oldCA.clientLeaf(t, day, x509.ExtKeyUsageClientAuth), newCA.clientLeaf(t, day, x509.ExtKeyUsageClientAuth)
	if got := getWithClientCert(proxy, "app.example.com", "app.example.com", oldCert, 0); got.status != http.StatusOK {
		t.Fatalf("old CA's certificate before the change: %d, %v", got.status, got.err)
	}
	apply(t, d, validatedListener(t, "ns/gw", 443, "", newCA, false, "ns/app:80"), server, cluster)
	if got := getWithClientCert(proxy, "app.example.com", "app.example.com", oldCert, 0); got.err == nil {
		t.Fatalf("old CA's certificate after the change: %d, want the handshake to fail", got.status)
	}
	if got := getWithClientCert(proxy, "app.example.com", "app.example.com", newCert, 0); got.status != http.StatusOK {
		t.Fatalf("new CA's certificate after the change: %d, %v", got.status, got.err)
	}
}

// Tests that a connection negotiated for a listener without validation cannot be reused for a
// host of a listener with validation on the same port: the request gets 421 and never reaches
// the validated listener's routes.
func TestFrontendClientCertificateValidationNoCoalescing(t *testing.T) {
	t.Parallel()
	app, hits := backend(t, "app")
	ca := newTestCA(t, "client-ca")
	server, _ := snaptest.Certificate(t, "ns/server", "a.example.com", "b.example.com")
	cluster := snaptest.Cluster(t, "ns/app:80", hostPort(app))
	d := start(t, dataplane.Options{})
	apply(t, d,
		validatedListener(t, "ns/a", 443, "a.example.com", ca, false, "ns/app:80"),
		validatedListener(t, "ns/b", 443, "b.example.com", nil, false, "ns/app:80"),
		server, cluster)
	proxy := addr(t, d, 443)
	if got := getWithClientCert(proxy, "a.example.com", "a.example.com", nil, 0); got.err == nil {
		t.Fatalf("a.example.com without a certificate: %d, want the handshake to fail", got.status)
	}
	got := getWithClientCert(proxy, "b.example.com", "a.example.com", nil, 0)
	if got.err != nil || got.status != http.StatusMisdirectedRequest {
		t.Fatalf("a.example.com over b.example.com's connection: %d, %v; want 421", got.status, got.err)
	}
	if hits.Load() != 0 {
		t.Errorf("the backend got %d requests", hits.Load())
	}
}

// Tests that a table with unusable client validation is refused and the last good one keeps
// serving: validation on an HTTP listener, CA certificates that do not parse.
func TestFrontendClientCertificateValidationRefused(t *testing.T) {
	t.Parallel()
	server, _ := snaptest.Certificate(t, "ns/server", "app.example.com")
	cases := []struct {
		name     string
		listener func() *discoveryv1.Listener
	}{
		{"validation on an HTTP listener", func() *discoveryv1.Listener {
			l := snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", ""))
			l.ClientValidation = &discoveryv1.ClientValidation{CaCertificatesPem: newTestCA(t, "ca").pem}
			return l
		}},
		{"CA certificates that do not parse", func() *discoveryv1.Listener {
			l := validatedListener(t, "ns/gw", 443, "", nil, false, "ns/app:80")
			l.ClientValidation = &discoveryv1.ClientValidation{CaCertificatesPem: []byte("not a certificate")}
			return l
		}},
		{"no CA certificate", func() *discoveryv1.Listener {
			l := validatedListener(t, "ns/gw", 443, "", nil, false, "ns/app:80")
			l.ClientValidation = &discoveryv1.ClientValidation{InsecureFallback: true}
			return l
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := start(t, dataplane.Options{})
			err := d.Apply(context.Background(), snaptest.Set(t, "bad", []proto.Message{tc.listener(), server}...))
			if !errors.Is(err, router.ErrInvalid) {
				t.Fatalf("apply: %v, want %v", err, router.ErrInvalid)
			}
		})
	}
}
