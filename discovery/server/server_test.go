package server_test

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/client"
	"coxswain.dev/coxswain/discovery/pki/pkitest"
	"coxswain.dev/coxswain/discovery/server"
	"coxswain.dev/coxswain/discovery/server/bootstrap"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/servertest"
	"coxswain.dev/coxswain/discovery/server/stream"
	"coxswain.dev/coxswain/discovery/tlsconfig"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// dedicated authenticates every token as the dedicated proxy of Gateway prod/web.
type dedicated struct{}

func (dedicated) Authenticate(context.Context, string) (bootstrap.Principal, error) {
	return bootstrap.Principal{Namespace: "prod", ServiceAccount: "web-coxswain", PodName: "web-0"}, nil
}

func (dedicated) Allowed(ns, sa string) bool { return ns == "prod" && sa == "web-coxswain" }

func (dedicated) ExpectedServiceAccount(ns, name string) (string, error) {
	if ns == "prod" && name == "web" {
		return "web-coxswain", nil
	}
	return "", stream.ErrUnknownGateway
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

// Tests the whole channel: a proxy bootstraps an SVID, streams its Gateway's snapshot with it,
// and is told UNAVAILABLE when the controller shuts down, which returns cleanly.
func TestBootstrapThenStreamThenShutdown(t *testing.T) {
	t.Parallel()
	p := servertest.NewPKI(t)
	log := testr.New(t)
	bundle, _ := p.Bundle.Bundle()
	boot, err := bootstrap.New(bootstrap.Config{
		TrustDomain: p.TD, Authenticator: dedicated{}, Allowlist: dedicated{},
		CA: bootstrap.StaticCA(p.CA, bundle), Logger: log.WithName("bootstrap"),
	})
	if err != nil {
		t.Fatal(err)
	}
	snapshots := cache.New(nil)
	web := cache.Gateway("prod", "web")
	r, _ := cache.NewResource("listener/http", wrapperspb.String("port 80"))
	if _, err := snapshots.Set(web, []*discoveryv1.Resource{r}); err != nil {
		t.Fatal(err)
	}
	strm, err := stream.New(stream.Config{
		TrustDomain: p.TD, Bundles: p.Bundle, Cache: snapshots, Scopes: dedicated{}, Logger: log.WithName("stream"),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{
		BootstrapTLS: p.BootstrapServerTLS(), StreamTLS: p.StreamServerTLS(),
		Bootstrap: boot, Stream: strm, ShutdownGrace: 5 * time.Second, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	bl, sl := listen(t), listen(t)
	ctx, stop := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, bl, sl) }()

	svid := bootstrapSVID(t, p, bl.Addr().String(), web)
	got := make(chan *discoveryv1.Snapshot, 1)
	ran := make(chan error, 1)
	go func() {
		ran <- client.Run(t.Context(), client.StreamConfig{
			Address: "passthrough:///" + sl.Addr().String(), NodeID: "web-0", Scope: web.Proto(),
			TLS: client.StreamTLS(tlsconfig.NewRotatingCertificate(svid.Certificate),
				tlsconfig.NewRotatingBundle(svid.Bundle), spiffeid.RequireFromString(servertest.ControllerID)),
		}, func(_ context.Context, s *discoveryv1.Snapshot) error {
			got <- s
			return nil
		})
	}()
	if s := <-got; !s.GetFull() || s.GetResources()[0].GetKey() != "listener/http" {
		t.Fatalf("first snapshot %v", s)
	}
	stop()
	if err := <-ran; status.Code(err) != codes.Unavailable {
		t.Errorf("the proxy saw %v, want Unavailable", err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve returned %v", err)
	}
}

func bootstrapSVID(t *testing.T, p *servertest.PKI, addr string, scope cache.Scope) *client.SVID {
	t.Helper()
	dir := t.TempDir()
	cfg := client.BootstrapConfig{
		Address: "passthrough:///" + addr, ServerName: servertest.ServerName,
		TokenPath: dir + "/token", BundlePath: dir + "/ca.crt", Scope: scope.Proto(),
	}
	bundle, _ := p.Bundle.Bundle()
	writeFile(t, cfg.TokenPath, []byte(pkitest.Token("prod", "web-coxswain")))
	writeFile(t, cfg.BundlePath, bundle.PEM())
	svid, err := client.Bootstrap(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return svid
}

// Tests that New refuses to build listeners without their TLS configs.
func TestNewRefusesMissingPieces(t *testing.T) {
	t.Parallel()
	p := servertest.NewPKI(t)
	bundle, _ := p.Bundle.Bundle()
	boot, err := bootstrap.New(bootstrap.Config{TrustDomain: p.TD, Authenticator: dedicated{}, Allowlist: dedicated{}, CA: bootstrap.StaticCA(p.CA, bundle)})
	if err != nil {
		t.Fatal(err)
	}
	strm, err := stream.New(stream.Config{TrustDomain: p.TD, Bundles: p.Bundle, Cache: cache.New(nil), Scopes: dedicated{}})
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]server.Config{
		"no services":         {BootstrapTLS: p.BootstrapServerTLS(), StreamTLS: p.StreamServerTLS()},
		"no bootstrap TLS":    {StreamTLS: p.StreamServerTLS(), Bootstrap: boot, Stream: strm},
		"no stream TLS":       {BootstrapTLS: p.BootstrapServerTLS(), Bootstrap: boot, Stream: strm},
		"server-auth streams": {BootstrapTLS: p.BootstrapServerTLS(), StreamTLS: p.BootstrapServerTLS(), Bootstrap: boot, Stream: strm},
	} {
		if _, err := server.New(cfg); err == nil {
			t.Errorf("%s was accepted", name)
		}
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
