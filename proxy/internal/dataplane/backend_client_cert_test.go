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
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// issueClient returns the PEM chain and key of a client certificate of ca named cn.
func (ca *testCA) issueClient(t *testing.T, cn string) (chain, key []byte) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &priv.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: raw})
}

// mtlsBackend starts a TLS server on 127.0.0.1 that requires a client certificate of clientCA
// and answers with its common name.
func mtlsBackend(t *testing.T, cert tls.Certificate, clientCA *testCA) string {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(clientCA.cert)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Client-CN", r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are what the tests expect
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS12,
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// Tests that a cluster with a client certificate presents it to a backend that requires one
// (the Gateway's backend clientCertificateRef): without a certificate, and with one of a CA the
// backend does not trust, the handshake fails and the answer is 502; with the right one the
// backend sees its name. Clusters that differ only in the client certificate do not share
// connections.
func TestBackendTLSClientCertificate(t *testing.T) {
	t.Parallel()
	serverCA, clientCA, otherCA := newTestCA(t, "backend-ca"), newTestCA(t, "client-ca"), newTestCA(t, "other-ca")
	backendAddr := mtlsBackend(t, serverCA.issue(t, leaf{dns: []string{"backend.example.com"}}), clientCA)
	goodChain, goodKey := clientCA.issueClient(t, "gateway-a")
	wrongChain, wrongKey := otherCA.issueClient(t, "gateway-b")

	settings := func(chain, key []byte) *discoveryv1.BackendTLS {
		return &discoveryv1.BackendTLS{
			ServerName: "backend.example.com", CaCertificatesPem: serverCA.pem,
			ClientCertificateChainPem: chain, ClientPrivateKeyPem: key,
		}
	}
	clusters := []*discoveryv1.Cluster{
		tlsCluster(t, "ns/without:443", backendAddr, settings(nil, nil)),
		tlsCluster(t, "ns/wrong:443", backendAddr, settings(wrongChain, wrongKey)),
		tlsCluster(t, "ns/with:443", backendAddr, settings(goodChain, goodKey)),
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
	d := start(t, dataplane.Options{})
	apply(t, d, msgs...)
	c := client(addr(t, d, 80))

	for _, tt := range []struct {
		path   string
		status int
		cn     string
	}{
		{"/without", http.StatusBadGateway, ""},
		{"/wrong", http.StatusBadGateway, ""},
		{"/with", http.StatusOK, "gateway-a"},
		{"/without", http.StatusBadGateway, ""}, // after /with: no pooled connection is reused
	} {
		resp := do(t, c, http.MethodGet, "http://app.example.com"+tt.path)
		if resp.status != tt.status {
			t.Errorf("%s: got %d, want %d: %s", tt.path, resp.status, tt.status, resp.body)
			continue
		}
		if got := resp.header.Get("X-Client-CN"); got != tt.cn {
			t.Errorf("%s: backend saw client certificate %q, want %q", tt.path, got, tt.cn)
		}
	}
}
