package h1client

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// tlsBackend is an HTTPS backend that answers with the protocol and the client certificate it
// saw; it offers h2 and http/1.1.
func tlsBackend(t *testing.T, clientAuth tls.ClientAuthType) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cn := "none"
		if len(r.TLS.PeerCertificates) > 0 {
			cn = "cert"
		}
		_, _ = io.WriteString(w, r.Proto+" "+cn)
	}))
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.TLS = &tls.Config{ClientAuth: clientAuth, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	if clientAuth != tls.NoClientCert {
		pool := x509.NewCertPool()
		pool.AddCert(srv.Certificate())
		srv.TLS.ClientCAs = pool
	}
	return srv
}

// clientConfig trusts srv's certificate, and presents it as the client's when cert is set.
func clientConfig(srv *httptest.Server, cert bool) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	cfg := &tls.Config{RootCAs: pool, ServerName: "example.com", MinVersion: tls.VersionTLS12}
	if cert {
		cfg.Certificates = srv.TLS.Certificates
	}
	return cfg
}

// Tests that backend TLS speaks HTTP/1.1 (ALPN http/1.1 alone, though the backend offers h2),
// reuses its connection, and presents the client certificate of its configuration.
func TestBackendTLS(t *testing.T) {
	t.Parallel()
	srv := tlsBackend(t, tls.RequestClientCert)
	addr := srv.Listener.Addr().String()
	tr := newTransport(t, Options{Address: addr, TLS: clientConfig(srv, true)})
	for range 2 {
		if _, body, err := get(t, tr, addr, "/"); err != nil || body != "HTTP/1.1 cert" {
			t.Fatalf("got %q %v, want HTTP/1.1 with the client certificate", body, err)
		}
	}
	if n := tr.IdleConns(); n != 1 {
		t.Errorf("%d idle connections, want the one reused", n)
	}
	plain := newTransport(t, Options{Address: addr, TLS: clientConfig(srv, false)})
	if _, body, err := get(t, plain, addr, "/"); err != nil || body != "HTTP/1.1 none" {
		t.Errorf("without a client certificate: %q %v", body, err)
	}
}

// Tests the TLS failures forward classifies: a certificate that does not verify is a
// *tls.CertificateVerificationError, a peer that does not speak TLS a tls.RecordHeaderError;
// and a backend refusing a missing client certificate fails the exchange.
func TestBackendTLSFailures(t *testing.T) {
	t.Parallel()
	srv := tlsBackend(t, tls.NoClientCert)
	addr := srv.Listener.Addr().String()
	untrusted := newTransport(t, Options{Address: addr, TLS: &tls.Config{ServerName: "example.com", MinVersion: tls.VersionTLS12}})
	_, _, err := get(t, untrusted, addr, "/")
	var verify *tls.CertificateVerificationError
	if !errors.As(err, &verify) {
		t.Errorf("an untrusted certificate: %v (%T)", err, err)
	}

	plain := newRawBackend(t, func(c net.Conn, _ *bufio.Reader) {
		_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
	})
	notTLS := newTransport(t, Options{Address: plain.addr(), TLS: clientConfig(srv, false)})
	_, _, err = get(t, notTLS, plain.addr(), "/")
	var record tls.RecordHeaderError
	if !errors.As(err, &record) {
		t.Errorf("a plaintext peer: %v (%T)", err, err)
	}

	strict := tlsBackend(t, tls.RequireAndVerifyClientCert)
	saddr := strict.Listener.Addr().String()
	noCert := newTransport(t, Options{Address: saddr, TLS: clientConfig(strict, false)})
	if _, _, err = get(t, noCert, saddr, "/"); err == nil {
		t.Error("a required client certificate missing: the exchange went through")
	}
}
