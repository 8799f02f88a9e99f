package client_test

import (
	"context"
	"crypto/ecdsa"
	"encoding/pem"
	"errors"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/client"
	"coxswain.dev/coxswain/discovery/pki/pkitest"
	"coxswain.dev/coxswain/discovery/server/servertest"
)

// Tests that Bootstrap returns an SVID for its own fresh key, named by the controller.
func TestBootstrapIssuesAnSVIDForAFreshKey(t *testing.T) {
	t.Parallel()
	p := servertest.NewPKI(t)
	cfg := writeFiles(t, p, serveBootstrap(t, p))
	first, err := client.Bootstrap(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	leaf := first.Certificate.Leaf
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != sharedID {
		t.Errorf("URI SANs %v, want %s", leaf.URIs, sharedID)
	}
	if !first.NotAfter.Equal(leaf.NotAfter) || time.Until(first.NotAfter) < time.Hour {
		t.Errorf("NotAfter %s, leaf %s", first.NotAfter, leaf.NotAfter)
	}
	if !first.Bundle.Contains(p.CA.Certificate()) {
		t.Error("the returned bundle lacks the CA")
	}
	second, err := client.Bootstrap(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if first.Certificate.Leaf.PublicKey.(*ecdsa.PublicKey).Equal(second.Certificate.Leaf.PublicKey) {
		t.Error("two bootstraps reused a key")
	}
}

// Tests that Bootstrap fails without its files or against a controller the bundle does not trust.
func TestBootstrapFailures(t *testing.T) {
	t.Parallel()
	p := servertest.NewPKI(t)
	addr := serveBootstrap(t, p)
	cases := map[string]func(t *testing.T, cfg *client.BootstrapConfig){
		"a missing token file": func(t *testing.T, cfg *client.BootstrapConfig) { cfg.TokenPath += ".missing" },
		"an empty token file": func(t *testing.T, cfg *client.BootstrapConfig) {
			if err := os.WriteFile(cfg.TokenPath, []byte("\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"a bundle file without certificates": func(t *testing.T, cfg *client.BootstrapConfig) {
			if err := os.WriteFile(cfg.BundlePath, []byte("nothing"), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"a bundle of a foreign CA": func(t *testing.T, cfg *client.BootstrapConfig) {
			other := pkitest.Bundle(pkitest.NewCA(t, servertest.TrustDomain))
			if err := os.WriteFile(cfg.BundlePath, other.PEM(), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"a server name the controller does not carry": func(_ *testing.T, cfg *client.BootstrapConfig) { cfg.ServerName = "other.test" },
	}
	for name, mutate := range cases {
		t.Run(name+" fails", func(t *testing.T) {
			t.Parallel()
			cfg := writeFiles(t, p, addr)
			mutate(t, &cfg)
			if svid, err := client.Bootstrap(t.Context(), cfg); err == nil {
				t.Fatalf("got an SVID for %s", svid.Certificate.Leaf.URIs)
			}
		})
	}
}

// lyingController answers every bootstrap with a fixed response or error.
type lyingController struct {
	discoveryv1.UnimplementedDiscoveryServer
	resp *discoveryv1.BootstrapResponse
	err  error
}

func (l *lyingController) Bootstrap(context.Context, *discoveryv1.BootstrapRequest) (*discoveryv1.BootstrapResponse, error) {
	return l.resp, l.err
}

// Tests that Bootstrap refuses an answer that is not an SVID for its key, and keeps the
// controller's status.
func TestBootstrapChecksTheAnswer(t *testing.T) {
	t.Parallel()
	p := servertest.NewPKI(t)
	foreign := pkitest.SignedSVID(t, pkitest.NewCA(t, servertest.TrustDomain), sharedID)
	forOtherKey := pkitest.SignedSVID(t, p.CA, sharedID)
	bundle, _ := p.Bundle.Bundle()
	pemOf := func(der []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}) }
	cases := []struct {
		name  string
		ctrl  *lyingController
		check func(error) bool
	}{
		{"a certificate for another key is refused", &lyingController{resp: &discoveryv1.BootstrapResponse{
			SvidChainPem: pemOf(forOtherKey.Certificate[0]), TrustBundlePem: bundle.PEM(), NotAfter: timestamppb.Now(),
		}}, func(err error) bool { return errors.Is(err, client.ErrInvalidResponse) }},
		{
			"an empty answer is refused", &lyingController{resp: &discoveryv1.BootstrapResponse{}},
			func(err error) bool { return errors.Is(err, client.ErrInvalidResponse) },
		},
		{"a certificate outside the bundle is refused", &lyingController{resp: &discoveryv1.BootstrapResponse{
			SvidChainPem: pemOf(foreign.Certificate[0]), TrustBundlePem: bundle.PEM(),
		}}, func(err error) bool { return errors.Is(err, client.ErrInvalidResponse) }},
		{
			"a wire version refusal is permanent", &lyingController{err: status.Error(codes.FailedPrecondition, "wire version")},
			client.IsPermanent,
		},
		{
			"a permission refusal is not permanent", &lyingController{err: status.Error(codes.PermissionDenied, "no")},
			func(err error) bool { return status.Code(err) == codes.PermissionDenied && !client.IsPermanent(err) },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(p.BootstrapServerTLS())))
			discoveryv1.RegisterDiscoveryServer(gs, tc.ctrl)
			_, err := client.Bootstrap(t.Context(), writeFiles(t, p, servertest.Serve(t, gs)))
			if err == nil || !tc.check(err) {
				t.Fatalf("error %v", err)
			}
		})
	}
}
