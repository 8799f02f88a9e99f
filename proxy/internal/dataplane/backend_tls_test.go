package dataplane_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// testCA is a certificate authority of a test, issuing backend certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// leaf is what a backend certificate holds.
type leaf struct {
	dns      []string
	uris     []string
	notAfter time.Time // a day from now when zero
}

func (ca *testCA) issue(t *testing.T, l leaf) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if l.notAfter.IsZero() {
		l.notAfter = time.Now().Add(24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "backend"},
		DNSNames:     l.dns,
		NotBefore:    time.Now().Add(-48 * time.Hour),
		NotAfter:     l.notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, u := range l.uris {
		parsed, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, parsed)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// tlsBackend starts a TLS server on 127.0.0.1 serving cert, HTTP/2 too when h2, that answers
// with the SNI it was asked for and the request's protocol, and counts the connections it
// accepted.
func tlsBackend(t *testing.T, cert tls.Certificate, h2 bool) (string, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-SNI", r.TLS.ServerName)
		w.Header().Set("X-Proto-Major", strconv.Itoa(r.ProtoMajor))
	}))
	srv.EnableHTTP2 = h2
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are what the tests expect
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), &conns
}

// tlsCluster returns a cluster reaching addr with the given TLS settings.
func tlsCluster(t *testing.T, name, addr string, settings *discoveryv1.BackendTLS) *discoveryv1.Cluster {
	cl := snaptest.Cluster(t, name, addr)
	cl.Tls = settings
	return cl
}

func hostnameSAN(h string) *discoveryv1.SubjectAltName {
	return &discoveryv1.SubjectAltName{Name: &discoveryv1.SubjectAltName_Hostname{Hostname: h}}
}

func uriSAN(u string) *discoveryv1.SubjectAltName {
	return &discoveryv1.SubjectAltName{Name: &discoveryv1.SubjectAltName_Uri{Uri: u}}
}

// Tests that a cluster with backend TLS reaches its backend over TLS with the policy's server
// name, and only when the backend proves the identity the policy asks for: the right CA and
// name pass; a wrong CA, a wrong hostname, an expired certificate, a backend that does not
// speak TLS and a certificate without any of the subject alt names each get 502, counted as
// upstream_tls. Subject alt names replace the hostname for authentication. HTTP/2 is
// negotiated with ALPN h2. A fail-closed cluster answers 503 without dialing.
func TestBackendTLS(t *testing.T) {
	t.Parallel()
	ca, other := newTestCA(t, "backend-ca"), newTestCA(t, "other-ca")
	good, _ := tlsBackend(t, ca.issue(t, leaf{dns: []string{"backend.example.com"}}), false)
	expired, _ := tlsBackend(t, ca.issue(t, leaf{dns: []string{"backend.example.com"}, notAfter: time.Now().Add(-time.Hour)}), false)
	spiffe, _ := tlsBackend(t, ca.issue(t, leaf{uris: []string{"spiffe://cluster.local/ns/app/sa/backend"}}), false)
	h2, _ := tlsBackend(t, ca.issue(t, leaf{dns: []string{"*.example.com"}}), true)
	closed, closedConns := tlsBackend(t, ca.issue(t, leaf{dns: []string{"backend.example.com"}}), false)
	plain, plainHits := backend(t, "plain")

	roots := func(c *testCA, name string, sans ...*discoveryv1.SubjectAltName) *discoveryv1.BackendTLS {
		return &discoveryv1.BackendTLS{ServerName: name, CaCertificatesPem: c.pem, SubjectAltNames: sans}
	}
	h2Cluster := tlsCluster(t, "ns/h2:443", h2, roots(ca, "grpc.example.com"))
	h2Cluster.UpstreamProtocol = discoveryv1.UpstreamProtocol_UPSTREAM_PROTOCOL_H2
	clusters := []*discoveryv1.Cluster{
		tlsCluster(t, "ns/right:443", good, roots(ca, "backend.example.com")),
		tlsCluster(t, "ns/wrong-ca:443", good, roots(other, "backend.example.com")),
		tlsCluster(t, "ns/wrong-host:443", good, roots(ca, "other.example.com")),
		tlsCluster(t, "ns/expired:443", expired, roots(ca, "backend.example.com")),
		tlsCluster(t, "ns/plaintext:443", hostPort(plain), roots(ca, "backend.example.com")),
		tlsCluster(t, "ns/san-hostname:443", good, roots(ca, "sni.example.com", hostnameSAN("nope.example.com"), hostnameSAN("backend.example.com"))),
		tlsCluster(t, "ns/san-uri:443", spiffe, roots(ca, "backend.example.com", uriSAN("spiffe://cluster.local/ns/app/sa/backend"))),
		tlsCluster(t, "ns/san-wrong:443", good, roots(ca, "backend.example.com", hostnameSAN("nope.example.com"), uriSAN("spiffe://cluster.local/ns/app/sa/backend"))),
		tlsCluster(t, "ns/fail-closed:443", closed, &discoveryv1.BackendTLS{ServerName: "backend.example.com", FailClosed: true}),
		h2Cluster,
	}
	var routes []*discoveryv1.Route
	for _, cl := range clusters {
		name := cl.GetName()[len("ns/") : len(cl.GetName())-len(":443")]
		routes = append(routes, snaptest.Route("ns/"+name+"/0/0", "", snaptest.Exact("/"+name), cl.GetName()))
	}
	msgs := []proto.Message{snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "", routes...))}
	for _, cl := range clusters {
		msgs = append(msgs, cl)
	}
	reg := prometheus.NewRegistry()
	d := start(t, dataplane.Options{Registerer: reg})
	apply(t, d, msgs...)
	c := client(addr(t, d, 80))

	for _, tt := range []struct {
		path       string
		status     int
		sni, proto string
	}{
		{"/right", http.StatusOK, "backend.example.com", "1"},
		{"/san-hostname", http.StatusOK, "sni.example.com", "1"},
		{"/san-uri", http.StatusOK, "backend.example.com", "1"},
		{"/h2", http.StatusOK, "grpc.example.com", "2"},
		{"/wrong-ca", http.StatusBadGateway, "", ""},
		{"/wrong-host", http.StatusBadGateway, "", ""},
		{"/expired", http.StatusBadGateway, "", ""},
		{"/plaintext", http.StatusBadGateway, "", ""},
		{"/san-wrong", http.StatusBadGateway, "", ""},
		{"/fail-closed", http.StatusServiceUnavailable, "", ""},
	} {
		resp := do(t, c, http.MethodGet, "http://app.example.com"+tt.path)
		if resp.status != tt.status {
			t.Errorf("%s: got %d, want %d: %s", tt.path, resp.status, tt.status, resp.body)
			continue
		}
		if got := resp.header.Get("X-SNI"); got != tt.sni {
			t.Errorf("%s: backend saw SNI %q, want %q", tt.path, got, tt.sni)
		}
		if got := resp.header.Get("X-Proto-Major"); got != tt.proto {
			t.Errorf("%s: backend answered over HTTP/%s, want HTTP/%s", tt.path, got, tt.proto)
		}
	}
	refused := func(reason string) float64 {
		return metricValue(t, reg, "coxswain_proxy_refused_requests_total", reason)
	}
	eventually(t, "five upstream_tls refusals", func() bool { return refused("upstream_tls") == 5 })
	eventually(t, "one backend_tls_policy refusal", func() bool { return refused("backend_tls_policy") == 1 })
	if got := plainHits.Load(); got != 0 {
		t.Errorf("the plaintext backend answered %d requests; a TLS cluster must never send plaintext HTTP", got)
	}
	if got := closedConns.Load(); got != 0 {
		t.Errorf("the fail-closed cluster's backend accepted %d connections, want none", got)
	}
}

// systemRootsEnv names the CA file a re-executed TestBackendTLSSystemRoots trusts as the system
// roots (SSL_CERT_FILE is read once per process, so the check runs in a process of its own).
const systemRootsEnv = "COXSWAIN_TEST_SYSTEM_ROOTS"

// Tests that a cluster with system roots verifies backends against the system's roots: a
// backend whose CA the system trusts passes, one of another CA gets 502.
func TestBackendTLSSystemRoots(t *testing.T) {
	if os.Getenv(systemRootsEnv) == "" {
		t.Parallel()
		ca := newTestCA(t, "system-ca")
		file := filepath.Join(t.TempDir(), "roots.pem")
		if err := os.WriteFile(file, ca.pem, 0o600); err != nil {
			t.Fatal(err)
		}
		keyFile := filepath.Join(t.TempDir(), "ca.der")
		keyDER, err := x509.MarshalECPrivateKey(ca.key)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyFile, keyDER, 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestBackendTLSSystemRoots$", "-test.count=1", "-test.v") //nolint:gosec // the test binary itself
		cmd.Env = append(os.Environ(), "SSL_CERT_FILE="+file, "SSL_CERT_DIR=", systemRootsEnv+"="+file+","+keyFile)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestBackendTLSSystemRoots") {
			t.Fatalf("system roots check failed: %v\n%s", err, out)
		}
		return
	}
	ca := loadTestCA(t, os.Getenv(systemRootsEnv))
	trusted, _ := tlsBackend(t, ca.issue(t, leaf{dns: []string{"backend.example.com"}}), false)
	untrusted, _ := tlsBackend(t, newTestCA(t, "private-ca").issue(t, leaf{dns: []string{"backend.example.com"}}), false)
	system := &discoveryv1.BackendTLS{ServerName: "backend.example.com", SystemRoots: true}
	d := start(t, dataplane.Options{})
	apply(t, d,
		snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "",
			snaptest.Route("ns/trusted/0/0", "", snaptest.Exact("/trusted"), "ns/trusted:443"),
			snaptest.Route("ns/untrusted/0/0", "", snaptest.Exact("/untrusted"), "ns/untrusted:443"),
		)),
		tlsCluster(t, "ns/trusted:443", trusted, system),
		tlsCluster(t, "ns/untrusted:443", untrusted, system),
	)
	c := client(addr(t, d, 80))
	if resp := do(t, c, http.MethodGet, "http://x/trusted"); resp.status != http.StatusOK {
		t.Errorf("a backend of a system-trusted CA: got %d: %s", resp.status, resp.body)
	}
	if resp := do(t, c, http.MethodGet, "http://x/untrusted"); resp.status != http.StatusBadGateway {
		t.Errorf("a backend of a CA the system does not trust: got %d, want 502", resp.status)
	}
}

// loadTestCA reads the CA a parent TestBackendTLSSystemRoots wrote: "<cert PEM file>,<key DER file>".
func loadTestCA(t *testing.T, files string) *testCA {
	t.Helper()
	certFile, keyFile, _ := strings.Cut(files, ",")
	certPEM, err := os.ReadFile(certFile) //nolint:gosec // written by the parent test
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := os.ReadFile(keyFile) //nolint:gosec // written by the parent test
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	key, err := x509.ParseECPrivateKey(keyDER)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: certPEM}
}
