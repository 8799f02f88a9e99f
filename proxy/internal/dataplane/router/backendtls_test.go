package router_test

import (
	"crypto/tls"
	"errors"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

func compileCluster(t *testing.T, cl *discoveryv1.Cluster) (*router.Cluster, error) {
	t.Helper()
	table, err := router.Compile(snaptest.Seq(snaptest.Resources(t, cl)))
	if err != nil {
		return nil, err
	}
	return table.Clusters()[0], nil
}

func withTLS(t *testing.T, p discoveryv1.UpstreamProtocol, settings *discoveryv1.BackendTLS) *discoveryv1.Cluster {
	cl := snaptest.Cluster(t, "ns/app:443", "10.0.0.1:8443")
	cl.UpstreamProtocol = p
	cl.Tls = settings
	return cl
}

// Tests that a cluster's TLS settings that cannot authenticate a backend, or that mix
// cleartext and TLS, are refused (the set is NACKed) rather than weakened.
func TestCompileRefusesBackendTLS(t *testing.T) {
	t.Parallel()
	caPEM := snaptestCA(t)
	for name, cl := range map[string]*discoveryv1.Cluster{
		"h2c with tls":                         withTLS(t, discoveryv1.UpstreamProtocol_UPSTREAM_PROTOCOL_H2C, &discoveryv1.BackendTLS{ServerName: "a", CaCertificatesPem: caPEM}),
		"h2 without tls":                       withTLS(t, discoveryv1.UpstreamProtocol_UPSTREAM_PROTOCOL_H2, nil),
		"no server name":                       withTLS(t, 0, &discoveryv1.BackendTLS{CaCertificatesPem: caPEM}),
		"no roots at all":                      withTLS(t, 0, &discoveryv1.BackendTLS{ServerName: "a"}),
		"roots that are no PEM":                withTLS(t, 0, &discoveryv1.BackendTLS{ServerName: "a", CaCertificatesPem: []byte("junk")}),
		"system and own roots":                 withTLS(t, 0, &discoveryv1.BackendTLS{ServerName: "a", CaCertificatesPem: caPEM, SystemRoots: true}),
		"an empty subject alt name":            withTLS(t, 0, &discoveryv1.BackendTLS{ServerName: "a", SystemRoots: true, SubjectAltNames: []*discoveryv1.SubjectAltName{{}}}),
		"a client certificate without its key": withTLS(t, 0, &discoveryv1.BackendTLS{ServerName: "a", SystemRoots: true, ClientCertificateChainPem: caPEM}),
		"a client key without its certificate": withTLS(t, 0, &discoveryv1.BackendTLS{ServerName: "a", SystemRoots: true, ClientPrivateKeyPem: []byte("junk")}),
	} {
		if _, err := compileCluster(t, cl); !errors.Is(err, router.ErrInvalid) {
			t.Errorf("%s: Compile error = %v, want ErrInvalid", name, err)
		}
	}
}

// Tests the client configuration a cluster's TLS settings compile to: TLS 1.2 at least, the
// server name, ALPN for the protocol, standard verification without subject alt names and the
// custom one with them; equal settings share a key, different ones do not.
func TestCompileBackendTLS(t *testing.T) {
	t.Parallel()
	caPEM := snaptestCA(t)
	plain := &discoveryv1.BackendTLS{ServerName: "backend.example.com", CaCertificatesPem: caPEM}
	h1, err := compileCluster(t, withTLS(t, discoveryv1.UpstreamProtocol_UPSTREAM_PROTOCOL_HTTP1, plain))
	if err != nil {
		t.Fatal(err)
	}
	cfg := h1.TLS.Config
	if cfg.MinVersion != tls.VersionTLS12 || cfg.ServerName != "backend.example.com" || cfg.RootCAs == nil ||
		cfg.InsecureSkipVerify || cfg.VerifyConnection != nil || !slices.Equal(cfg.NextProtos, []string{"http/1.1"}) || h1.TLS.HTTP2 {
		t.Errorf("HTTP/1.1 cluster: unexpected config %+v", cfg)
	}
	h2, err := compileCluster(t, withTLS(t, discoveryv1.UpstreamProtocol_UPSTREAM_PROTOCOL_H2, plain))
	if err != nil {
		t.Fatal(err)
	}
	if !h2.TLS.HTTP2 || !slices.Equal(h2.TLS.Config.NextProtos, []string{"h2"}) || h2.TLS.Key == h1.TLS.Key {
		t.Errorf("HTTP/2 cluster: HTTP2 %t, ALPN %v, key shared with HTTP/1.1: %t", h2.TLS.HTTP2, h2.TLS.Config.NextProtos, h2.TLS.Key == h1.TLS.Key)
	}
	withSANs := proto.Clone(plain).(*discoveryv1.BackendTLS)
	withSANs.SubjectAltNames = []*discoveryv1.SubjectAltName{{Name: &discoveryv1.SubjectAltName_Uri{Uri: "spiffe://x/y"}}}
	san, err := compileCluster(t, withTLS(t, 0, withSANs))
	if err != nil {
		t.Fatal(err)
	}
	if !san.TLS.Config.InsecureSkipVerify || san.TLS.Config.VerifyConnection == nil || san.TLS.Key == h1.TLS.Key {
		t.Errorf("subject alt names: the chain and names must be verified by VerifyConnection, with a key of their own")
	}
	system, err := compileCluster(t, withTLS(t, 0, &discoveryv1.BackendTLS{ServerName: "a", SystemRoots: true}))
	if err != nil {
		t.Fatal(err)
	}
	if system.TLS.Config.RootCAs != nil {
		t.Error("system roots: RootCAs must be nil so the system's roots verify")
	}
	closed, err := compileCluster(t, withTLS(t, 0, &discoveryv1.BackendTLS{ServerName: "a", FailClosed: true}))
	if err != nil {
		t.Fatal(err)
	}
	if !closed.TLS.FailClosed || closed.TLS.Config != nil {
		t.Error("fail closed: the cluster must be marked and hold no client configuration")
	}
	again, err := compileCluster(t, withTLS(t, 0, plain))
	if err != nil {
		t.Fatal(err)
	}
	if again.TLS.Key != h1.TLS.Key {
		t.Error("equal settings compiled to different keys")
	}
}

// snaptestCA returns a PEM certificate usable as a root.
func snaptestCA(t *testing.T) []byte {
	t.Helper()
	cert, _ := snaptest.Certificate(t, "ca", "ca.example.com")
	return cert.GetCertificateChainPem()
}
