package h1server

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Tests a TLS connection: the handshake is the caller's, the request carries its state, the
// connection persists (its idle wait is a 1-byte read) and a chunked response with trailers
// and a response with a head and body joined into one write come through.
func TestTLS(t *testing.T) {
	donor := httptest.NewUnstartedServer(nil)
	donor.StartTLS()
	cert := donor.TLS.Certificates[0]
	roots := donor.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	donor.Close()
	srv := New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || !r.TLS.HandshakeComplete {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		if r.URL.Path == "/stream" {
			w.Header().Set("Trailer", "X-T")
			_, _ = io.WriteString(w, strings.Repeat("s", 5000))
			w.(http.Flusher).Flush()
			w.Header().Set("X-T", "t")
			return
		}
		_, _ = io.WriteString(w, "secure")
	}), Options{})
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		if err := tc.HandshakeContext(context.Background()); err != nil {
			_ = c.Close()
			return
		}
		_ = srv.ServeConn(tc)
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		srv.Close()
		<-done
	})
	raw := dialAddr(t, ln.Addr().String())
	c := tls.Client(raw, &tls.Config{RootCAs: roots, ServerName: "example.com", MinVersion: tls.VersionTLS12})
	br := bufio.NewReader(c)
	for range 2 {
		write(t, c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
		if resp, body := readResponse(t, br, http.MethodGet); resp.StatusCode != http.StatusOK || body != "secure" {
			t.Fatalf("status %d body %q", resp.StatusCode, body)
		}
	}
	write(t, c, "GET /stream HTTP/1.1\r\nHost: a\r\n\r\n")
	resp, body := readResponse(t, br, http.MethodGet)
	if len(body) != 5000 || resp.Trailer.Get("X-T") != "t" {
		t.Fatalf("body of %d bytes, trailers %v", len(body), resp.Trailer)
	}
}
