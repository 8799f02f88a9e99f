package agent_test

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/pki/pkitest"
	"coxswain.dev/coxswain/discovery/server/bootstrap"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/servertest"
	"coxswain.dev/coxswain/discovery/server/stream"
	"coxswain.dev/coxswain/discovery/tlsconfig"
	"coxswain.dev/coxswain/discovery/wellknown"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const sharedID = "spiffe://cluster.local/ns/coxswain-system/sa/coxswain-shared-proxy"

// sharedToken is shaped like the shared proxy's projected token; the test Authenticator knows it.
var sharedToken = pkitest.Token("coxswain-system", "coxswain-shared-proxy")

// tokens is an Authenticator over a fixed token -> ServiceAccount table.
type tokens map[string]bootstrap.Principal

func (t tokens) Authenticate(_ context.Context, token string) (bootstrap.Principal, error) {
	p, ok := t[token]
	if !ok {
		return bootstrap.Principal{}, bootstrap.ErrUnauthenticated
	}
	return p, nil
}

type allowAll struct{}

func (allowAll) Allowed(string, string) bool { return true }

type noGateways struct{}

func (noGateways) ExpectedServiceAccount(ns, name string) (string, error) {
	return "", stream.ErrUnknownGateway
}

// controller runs the real bootstrap and stream services on loopback listeners with real TLS,
// and can be stopped and started again on the same ports, as a restarted controller would.
type controller struct {
	t     *testing.T
	pki   *servertest.PKI
	cache *cache.Cache
	// ttl is the SVID lifetime the bootstrap service issues.
	ttl time.Duration
	// now is the bootstrap service's clock; the wall clock when nil.
	now func() time.Time
	// streamCert, when set, is what the stream listener presents instead of the controller's
	// serving certificate.
	streamCert *tls.Certificate
	// bootstrapRefusal, when set, is what every bootstrap gets instead of an SVID.
	bootstrapRefusal error
	// streamRefusal, when set, is what every authorized stream gets instead of snapshots.
	streamRefusal error

	bootstrapAddr, streamAddr string
	streamMetrics             *prometheus.Registry
	servers                   []*grpc.Server
	serving                   sync.WaitGroup

	mu         sync.Mutex
	csrKeys    []crypto.PublicKey
	streamKeys []crypto.PublicKey
	// presented is, for every bootstrap, the URI SAN of the certificate the proxy presented on
	// the bootstrap connection, "" when none.
	presented []string
}

func newController(t *testing.T) *controller {
	t.Helper()
	c := &controller{t: t, pki: servertest.NewPKI(t), cache: cache.New(nil), ttl: wellknown.DefaultSVIDTTL}
	t.Cleanup(c.stop)
	return c
}

// start serves both listeners, on the ports of the previous start if there was one.
func (c *controller) start() {
	c.t.Helper()
	c.bootstrapAddr = c.serve(c.bootstrapAddr, c.bootstrapServer())
	c.streamAddr = c.serve(c.streamAddr, c.streamServer())
}

func (c *controller) bootstrapServer() *grpc.Server {
	c.t.Helper()
	bundle, err := c.pki.Bundle.Bundle()
	if err != nil {
		c.t.Fatal(err)
	}
	svc, err := bootstrap.New(bootstrap.Config{
		TrustDomain: c.pki.TD,
		Authenticator: tokens{sharedToken: {
			Namespace: wellknown.InstallNamespace, ServiceAccount: wellknown.SharedProxyServiceAccount, PodName: "proxy-0",
		}},
		Allowlist: allowAll{},
		CA:        bootstrap.StaticCA(c.pki.CA, bundle),
		SVIDTTL:   c.ttl,
		Now:       c.now,
		Logger:    testr.New(c.t).WithName("bootstrap"),
	})
	if err != nil {
		c.t.Fatal(err)
	}
	gs, err := svc.NewGRPCServer(c.pki.BootstrapServerTLS(), grpc.ChainUnaryInterceptor(c.recordCSR))
	if err != nil {
		c.t.Fatal(err)
	}
	return gs
}

func (c *controller) streamServer() *grpc.Server {
	c.t.Helper()
	c.streamMetrics = prometheus.NewRegistry()
	srv, err := stream.New(stream.Config{
		TrustDomain: c.pki.TD, Bundles: c.pki.Bundle, Cache: c.cache, Scopes: noGateways{},
		Registerer: c.streamMetrics, Logger: testr.New(c.t).WithName("stream"),
	})
	if err != nil {
		c.t.Fatal(err)
	}
	serverTLS := c.pki.StreamServerTLS()
	if c.streamCert != nil {
		serverTLS = tlsconfig.MTLSServer(tlsconfig.NewRotatingCertificate(c.streamCert), c.pki.Bundle, c.pki.TD, tlsconfig.AuthorizeAny())
	}
	gs, err := srv.NewGRPCServer(serverTLS, grpc.ChainStreamInterceptor(c.recordStream))
	if err != nil {
		c.t.Fatal(err)
	}
	return gs
}

// recordCSR keeps the public key of every CSR the bootstrap service receives.
func (c *controller) recordCSR(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if csr, err := x509.ParseCertificateRequest(req.(*discoveryv1.BootstrapRequest).GetCsr()); err == nil {
		presented := ""
		if p, ok := peer.FromContext(ctx); ok {
			if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 && len(info.State.PeerCertificates[0].URIs) == 1 {
				presented = info.State.PeerCertificates[0].URIs[0].String()
			}
		}
		c.mu.Lock()
		c.csrKeys = append(c.csrKeys, csr.PublicKey)
		c.presented = append(c.presented, presented)
		c.mu.Unlock()
	}
	if c.bootstrapRefusal != nil {
		return nil, c.bootstrapRefusal
	}
	return handler(ctx, req)
}

// recordStream keeps the public key of the client certificate of every authorized stream.
func (c *controller) recordStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if p, ok := peer.FromContext(ss.Context()); ok {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
			c.mu.Lock()
			c.streamKeys = append(c.streamKeys, info.State.PeerCertificates[0].PublicKey)
			c.mu.Unlock()
		}
	}
	if c.streamRefusal != nil {
		return c.streamRefusal
	}
	return handler(srv, ss)
}

func (c *controller) serve(addr string, gs *grpc.Server) string {
	c.t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		c.t.Fatal(err)
	}
	c.servers = append(c.servers, gs)
	c.serving.Go(func() { _ = gs.Serve(lis) })
	return lis.Addr().String()
}

// stop kills both listeners and every connection, as a crashed controller would.
func (c *controller) stop() {
	for _, gs := range c.servers {
		gs.Stop()
	}
	c.servers = nil
	c.serving.Wait()
}

// counts returns how many bootstraps and streams reached the services.
func (c *controller) counts() (bootstraps, streams int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.csrKeys), len(c.streamKeys)
}

func (c *controller) keys() (csr, streams []crypto.PublicKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]crypto.PublicKey(nil), c.csrKeys...), append([]crypto.PublicKey(nil), c.streamKeys...)
}

// set replaces the shared pool's resources with key -> string payloads and returns the version.
func (c *controller) set(resources map[string]string) string {
	c.t.Helper()
	rs := make([]*discoveryv1.Resource, 0, len(resources))
	for k, v := range resources {
		rs = append(rs, stringResource(c.t, k, v))
	}
	if _, err := c.cache.Set(cache.SharedPool(), rs); err != nil {
		c.t.Fatal(err)
	}
	return c.cache.Get(cache.SharedPool()).Version()
}

// bundlePEM is the trust bundle as the kubelet mounts it.
func (c *controller) bundlePEM() []byte {
	return pkitest.Bundle(c.pki.CA).PEM()
}

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// anotherRelease is how the services of a controller that speaks another wire version answer.
var anotherRelease = status.Error(codes.FailedPrecondition, "wire version 1, server speaks 2")

// metric returns the value of the stream service's counter name whose label, if any, is label.
func metric(t *testing.T, c *controller, name, label string) float64 {
	t.Helper()
	families, err := c.streamMetrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if label == "" || (len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == label) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
