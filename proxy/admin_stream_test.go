package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/pki/pkitest"
	"coxswain.dev/coxswain/discovery/server/bootstrap"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/servertest"
	"coxswain.dev/coxswain/discovery/server/stream"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// sharedPoolToken is shaped like the shared proxy's projected token; sharedPoolAuth knows it.
var sharedPoolToken = pkitest.Token(wellknown.InstallNamespace, wellknown.SharedProxyServiceAccount)

// sharedPoolAuth authenticates sharedPoolToken as the shared proxy, and nothing else.
type sharedPoolAuth struct{}

func (sharedPoolAuth) Authenticate(_ context.Context, token string) (bootstrap.Principal, error) {
	if token != sharedPoolToken {
		return bootstrap.Principal{}, bootstrap.ErrUnauthenticated
	}
	return bootstrap.Principal{Namespace: wellknown.InstallNamespace, ServiceAccount: wellknown.SharedProxyServiceAccount, PodName: "proxy-0"}, nil
}

type allowAll struct{}

func (allowAll) Allowed(string, string) bool { return true }

type noGateways struct{}

func (noGateways) ExpectedServiceAccount(string, string) (string, error) {
	return "", stream.ErrUnknownGateway
}

// startController serves the real bootstrap and stream services over real TLS on the loopback,
// with c's shared pool snapshot, and returns the proxy flags that reach them.
func startController(t *testing.T, c *cache.Cache) []string {
	t.Helper()
	p := servertest.NewPKI(t)
	bundle, err := p.Bundle.Bundle()
	if err != nil {
		t.Fatal(err)
	}
	boot, err := bootstrap.New(bootstrap.Config{
		TrustDomain: p.TD, Authenticator: sharedPoolAuth{}, Allowlist: allowAll{},
		CA: bootstrap.StaticCA(p.CA, bundle), SVIDTTL: time.Hour, Logger: testr.New(t).WithName("bootstrap"),
	})
	if err != nil {
		t.Fatal(err)
	}
	bootServer, err := boot.NewGRPCServer(p.BootstrapServerTLS())
	if err != nil {
		t.Fatal(err)
	}
	streams, err := stream.New(stream.Config{
		TrustDomain: p.TD, Bundles: p.Bundle, Cache: c, Scopes: noGateways{},
		Registerer: prometheus.NewRegistry(), Logger: testr.New(t).WithName("stream"),
	})
	if err != nil {
		t.Fatal(err)
	}
	streamServer, err := streams.NewGRPCServer(p.StreamServerTLS())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	token, trust := filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(token, []byte(sharedPoolToken), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(trust, pkitest.Bundle(p.CA).PEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{
		"--discovery-endpoint=" + servertest.Serve(t, streamServer), "--bootstrap-endpoint=" + servertest.Serve(t, bootServer),
		"--discovery-server-name=" + servertest.ServerName, "--token-path=" + token, "--trust-bundle-path=" + trust,
	}
}

// Tests the admin port end to end: a proxy that bootstraps from the real discovery services
// and receives its snapshot over the mTLS stream shows, on its loopback admin port, the version
// the controller published, then the next one, with the listener's private key redacted.
func TestAdminPortShowsTheSnapshotTheControllerSent(t *testing.T) {
	t.Parallel()
	c := cache.New(nil)
	cert, _ := snaptest.Certificate(t, "ns/cert", "app.example.com")
	vh := snaptest.VHost("web", "app.example.com", snaptest.Route("ns/web/0/0", "", snaptest.Prefix("/"), "ns/app:80"))
	vh.Certificates = []string{"ns/cert"}
	listener := snaptest.Listener("ns/gw", freePort(t), discoveryv1.Protocol_PROTOCOL_HTTPS, vh)
	publish := func(endpoint string) string {
		t.Helper()
		if _, err := c.Set(cache.SharedPool(), snaptest.Resources(t, listener, cert, snaptest.Cluster(t, "ns/app:80", endpoint))); err != nil {
			t.Fatal(err)
		}
		return c.Get(cache.SharedPool()).Version()
	}
	first := publish("127.0.0.1:1")
	p := startAdminProxy(t, append(startController(t, c), "--admin-address=127.0.0.1:0")...)
	url := "http://" + p.admin.Addr().String() + "/snapshot"

	waitForVersion := func(version string) string {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			code, body := get(t, url)
			var v struct{ Version, Hash string }
			if code == http.StatusOK {
				if err := json.Unmarshal([]byte(body), &v); err != nil {
					t.Fatal(err)
				}
			}
			if v.Version == version && v.Hash == version {
				return body
			}
			if time.Now().After(deadline) {
				t.Fatalf("the admin port never showed version %s: %d %.200s", version, code, body)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitForVersion(first)
	second := publish("127.0.0.1:2")
	if second == first {
		t.Fatal("a new endpoint did not change the version")
	}
	body := waitForVersion(second)
	if !strings.Contains(body, `"address": "127.0.0.1"`) || !strings.Contains(body, `"port": 2`) || !strings.Contains(body, `"privateKeyPem": "[redacted]"`) {
		t.Errorf("the second snapshot's JSON:\n%s", body)
	}
	if strings.Contains(body, "PRIVATE KEY") || strings.Contains(body, strings.Split(string(cert.GetPrivateKeyPem()), "\n")[1]) {
		t.Errorf("the admin port shows the listener's private key:\n%s", body)
	}
}
