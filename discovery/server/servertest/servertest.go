package servertest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/discovery/pki/pkitest"
	"coxswain.dev/coxswain/discovery/tlsconfig"
	"coxswain.dev/coxswain/discovery/wellknown"
)

const (
	// TrustDomain is the trust domain of the test CA.
	TrustDomain = wellknown.DefaultTrustDomain
	// ServerName is the DNS SAN of the controller's test serving certificate.
	ServerName = "discovery.test"
	// ControllerID is the SPIFFE ID of the controller's test serving certificate.
	ControllerID = "spiffe://cluster.local/ns/coxswain-system/sa/coxswain-controller"
)

// PKI is a test CA with the controller's serving certificate and trust bundle as rotating
// sources, as the operator wires them.
type PKI struct {
	TD         spiffeid.TrustDomain
	CA         *pki.CA
	Bundle     *tlsconfig.RotatingBundle
	ServerCert *tlsconfig.RotatingCertificate
}

// NewPKI returns a fresh CA for TrustDomain with a serving certificate for ServerName.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	return NewPKIFrom(t, pkitest.NewCA(t, TrustDomain))
}

// NewPKIFrom is NewPKI around an existing CA.
func NewPKIFrom(t testing.TB, ca *pki.CA) *PKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cert, _, err := ca.IssueServerCert(key.Public(), spiffeid.RequireFromString(ControllerID),
		[]string{ServerName}, time.Hour, time.Now())
	if err != nil {
		t.Fatalf("servertest: issue serving certificate: %v", err)
	}
	return &PKI{
		TD:         spiffeid.RequireTrustDomainFromString(TrustDomain),
		CA:         ca,
		Bundle:     tlsconfig.NewRotatingBundle(pkitest.Bundle(ca)),
		ServerCert: tlsconfig.NewRotatingCertificate(tlsconfig.NewCertificate(key, cert)),
	}
}

// BootstrapServerTLS is the bootstrap listener's TLS config.
func (p *PKI) BootstrapServerTLS() *tls.Config { return tlsconfig.BootstrapServer(p.ServerCert) }

// BootstrapClientTLS is a proxy's bootstrap TLS config.
func (p *PKI) BootstrapClientTLS() *tls.Config {
	return tlsconfig.BootstrapClient(p.Bundle, ServerName, tlsconfig.AuthorizeID(spiffeid.RequireFromString(ControllerID)))
}

// StreamServerTLS is the stream listener's mTLS config, accepting any workload of the trust domain.
func (p *PKI) StreamServerTLS() *tls.Config {
	return tlsconfig.MTLSServer(p.ServerCert, p.Bundle, p.TD, tlsconfig.AuthorizeAny())
}

// StreamClientTLS is a proxy's mTLS config presenting cert and expecting the controller.
func (p *PKI) StreamClientTLS(cert *tls.Certificate) *tls.Config {
	return tlsconfig.MTLSClient(tlsconfig.NewRotatingCertificate(cert), p.Bundle, p.TD,
		tlsconfig.AuthorizeID(spiffeid.RequireFromString(ControllerID)))
}

// SVID returns a certificate for id signed by the test CA through the production path.
func (p *PKI) SVID(t testing.TB, id string) *tls.Certificate {
	t.Helper()
	return pkitest.SignedSVID(t, p.CA, id)
}

// Serve serves gs on a fresh loopback listener until the test ends and returns its address.
func Serve(t testing.TB, gs *grpc.Server) string {
	t.Helper()
	lis, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- gs.Serve(lis) }()
	t.Cleanup(func() {
		gs.Stop()
		if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("servertest: serve: %v", err)
		}
	})
	return lis.Addr().String()
}

// Dial returns a connection to addr over TLS with cfg, closed when the test ends.
func Dial(t testing.TB, addr string, cfg *tls.Config, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}, opts...)
	conn, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
