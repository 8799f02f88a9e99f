package upstream

import (
	"crypto/tls"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/h1client"
	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// Tests that an address reached over TLS by one cluster and in plaintext by another gets two
// endpoints, so no connection of one carries the other's requests; that a fail-closed cluster
// holds no endpoint; and that retiring the TLS cluster forgets its endpoint alone.
func TestTLSEndpointsAreKeptApart(t *testing.T) {
	t.Parallel()
	for _, engine := range http1.Engines {
		t.Run(string(engine), func(t *testing.T) {
			t.Parallel()
			testTLSEndpointsAreKeptApart(t, engine)
		})
	}
}

func testTLSEndpointsAreKeptApart(t *testing.T, engine http1.Engine) {
	ca, _ := snaptest.Certificate(t, "ca", "ca.example.com")
	plain := snaptest.Cluster(t, "ns/plain:80", "10.0.0.1:8443")
	secure := snaptest.Cluster(t, "ns/secure:443", "10.0.0.1:8443")
	secure.Tls = &discoveryv1.BackendTLS{ServerName: "secure.example.com", CaCertificatesPem: ca.GetCertificateChainPem()}
	closed := snaptest.Cluster(t, "ns/closed:443", "10.0.0.2:8443")
	closed.Tls = &discoveryv1.BackendTLS{ServerName: "closed.example.com", FailClosed: true}
	p := NewPool(Options{Engine: engine})
	t1 := update(t, nil, closed, plain, secure)
	s1 := p.Build(nil, t1)
	p.Retire(nil, s1)
	cl, pl, se := s1.Cluster(0), s1.Cluster(1), s1.Cluster(2)
	if !cl.FailClosed || cl.Next() != nil {
		t.Error("the fail-closed cluster holds an endpoint")
	}
	if pl.Next() == se.Next() || pl.Scheme() != "http" || se.Scheme() != "https" {
		t.Fatal("the plaintext and TLS clusters share an endpoint or a scheme")
	}
	if cfg := tlsConfigOf(t, se.Transport(se.Next()), engine); cfg == nil || cfg.ServerName != "secure.example.com" {
		t.Errorf("the TLS cluster's transport does not carry its TLS settings")
	}
	if tlsConfigOf(t, pl.Transport(pl.Next()), engine) != nil {
		t.Error("the plaintext cluster's transport carries TLS settings")
	}

	t2 := update(t, t1, plain)
	s2 := p.Build(s1, t2)
	p.Retire(s1, s2)
	keys := slices.Collect(maps.Keys(p.clients))
	if len(keys) != 1 || strings.HasPrefix(keys[0], "tls/") {
		t.Errorf("endpoints held %v after the TLS cluster left, want the plaintext one alone", keys)
	}
}

// tlsConfigOf returns the TLS settings of an HTTP/1.1 transport of engine, failing when the
// transport is not the engine's.
func tlsConfigOf(t *testing.T, rt http.RoundTripper, engine http1.Engine) *tls.Config {
	t.Helper()
	switch tr := rt.(type) {
	case *guarded:
		if engine != http1.EngineNetHTTP {
			t.Fatalf("the %s engine's endpoint has Go's Transport", engine)
		}
		return tr.TLSClientConfig
	case *http.Transport:
		if engine != http1.EngineNetHTTP {
			t.Fatalf("the %s engine's endpoint has Go's Transport", engine)
		}
		return tr.TLSClientConfig
	case *h1client.Transport:
		if engine != http1.EngineNative {
			t.Fatalf("the %s engine's endpoint has the native client", engine)
		}
		return tr.TLSConfig()
	}
	t.Fatalf("transport %T", rt)
	return nil
}
