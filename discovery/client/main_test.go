package client_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr/testr"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/wrapperspb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/client"
	"coxswain.dev/coxswain/discovery/pki/pkitest"
	"coxswain.dev/coxswain/discovery/server/bootstrap"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/servertest"
	"coxswain.dev/coxswain/discovery/server/stream"
	"coxswain.dev/coxswain/discovery/wellknown"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const sharedID = "spiffe://cluster.local/ns/coxswain-system/sa/coxswain-shared-proxy"

// sharedProxy authenticates every token as the shared proxy pool.
type sharedProxy struct{}

func (sharedProxy) Authenticate(context.Context, string) (bootstrap.Principal, error) {
	return bootstrap.Principal{Namespace: wellknown.InstallNamespace, ServiceAccount: wellknown.SharedProxyServiceAccount}, nil
}

func (sharedProxy) Allowed(ns, sa string) bool {
	return ns == wellknown.InstallNamespace && sa == wellknown.SharedProxyServiceAccount
}

// noGateways knows no dedicated Gateway.
type noGateways struct{}

func (noGateways) ExpectedServiceAccount(string, string) (string, error) {
	return "", stream.ErrUnknownGateway
}

// writeFiles writes a token and the PKI's bundle where a proxy mounts them and returns a
// bootstrap config for addr.
func writeFiles(t *testing.T, p *servertest.PKI, addr string) client.BootstrapConfig {
	t.Helper()
	dir := t.TempDir()
	cfg := client.BootstrapConfig{
		Address: "passthrough:///" + addr, ServerName: servertest.ServerName,
		TokenPath: filepath.Join(dir, "token"), BundlePath: filepath.Join(dir, "ca.crt"),
		Scope: cache.SharedPool().Proto(),
	}
	bundle, err := p.Bundle.Bundle()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.TokenPath, []byte(pkitest.Token("coxswain-system", "coxswain-shared-proxy")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.BundlePath, bundle.PEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// serveBootstrap runs a bootstrap service for the shared proxy pool.
func serveBootstrap(t *testing.T, p *servertest.PKI) string {
	t.Helper()
	bundle, err := p.Bundle.Bundle()
	if err != nil {
		t.Fatal(err)
	}
	svc, err := bootstrap.New(bootstrap.Config{
		TrustDomain: p.TD, Authenticator: sharedProxy{}, Allowlist: sharedProxy{},
		CA: bootstrap.StaticCA(p.CA, bundle), Logger: testr.New(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	gs, err := svc.NewGRPCServer(p.BootstrapServerTLS())
	if err != nil {
		t.Fatal(err)
	}
	return servertest.Serve(t, gs)
}

// serveStream runs a stream server over c.
func serveStream(t *testing.T, p *servertest.PKI, c *cache.Cache) string {
	t.Helper()
	srv, err := stream.New(stream.Config{
		TrustDomain: p.TD, Bundles: p.Bundle, Cache: c, Scopes: noGateways{}, Logger: testr.New(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	gs, err := srv.NewGRPCServer(p.StreamServerTLS())
	if err != nil {
		t.Fatal(err)
	}
	return servertest.Serve(t, gs)
}

func controllerID() spiffeid.ID { return spiffeid.RequireFromString(servertest.ControllerID) }

func set(t *testing.T, c *cache.Cache, kv map[string]string) {
	t.Helper()
	var rs []*discoveryv1.Resource
	for k, v := range kv {
		r, err := cache.NewResource(k, wrapperspb.String(v))
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	if _, err := c.Set(cache.SharedPool(), rs); err != nil {
		t.Fatal(err)
	}
}
