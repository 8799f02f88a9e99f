package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
	"coxswain.dev/coxswain/proxy/internal/resource"
)

// startAdminProxy runs the process with flags (and a controller it cannot reach) until the
// test ends.
func startAdminProxy(t *testing.T, flags ...string) *process {
	t.Helper()
	dir := t.TempDir()
	o, err := parseFlags(append([]string{
		"--discovery-endpoint=127.0.0.1:1", "--discovery-server-name=discovery.test", "--node-id=proxy-0",
		"--health-address=127.0.0.1:0", "--listen-host=127.0.0.1", "--access-log=false", "--drain-period=0",
		"--token-path=" + filepath.Join(dir, "token"), "--trust-bundle-path=" + filepath.Join(dir, "ca.crt"),
	}, flags...))
	if err != nil {
		t.Fatal(err)
	}
	p, err := newProcess(t.Context(), o, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("run did not return after its context ended")
		}
	})
	return p
}

// applyTLSSet applies, as the agent does, a set at its content hash with an HTTPS listener,
// its certificate and a cluster, and returns it with the certificate.
func applyTLSSet(t *testing.T, p *process) (*resource.Set, *discoveryv1.Certificate) {
	t.Helper()
	cert, _ := snaptest.Certificate(t, "ns/cert", "app.example.com")
	vh := snaptest.VHost("web", "app.example.com", snaptest.Route("ns/web/0/0", "", snaptest.Prefix("/"), "ns/app:80"))
	vh.Certificates = []string{"ns/cert"}
	resources := snaptest.Resources(t, snaptest.Listener("ns/gw", freePort(t), discoveryv1.Protocol_PROTOCOL_HTTPS, vh), cert,
		snaptest.Cluster(t, "ns/app:80", "127.0.0.1:1"))
	hashed, err := cache.NewSnapshot(resources, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	set, err := resource.NewSet(hashed.Version(), resources)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.applied.Apply(t.Context(), set); err != nil {
		t.Fatal(err)
	}
	return set, cert
}

// Tests that the admin port, on the loopback by default, serves the snapshot the data plane
// applied with its listener's private key redacted, and the profiles with --admin-pprof; and
// that the health address, which the pod network reaches, serves neither.
func TestAdminPortServesTheAppliedSnapshot(t *testing.T) {
	t.Parallel()
	p := startAdminProxy(t, "--admin-address=127.0.0.1:0", "--admin-pprof")
	admin, health := "http://"+p.admin.Addr().String(), "http://"+p.lis.Addr().String()
	before := time.Now()
	set, cert := applyTLSSet(t, p)

	code, body := get(t, admin+"/snapshot")
	if code != http.StatusOK {
		t.Fatalf("/snapshot = %d %s", code, body)
	}
	var v struct {
		Version, Hash string
		AppliedAt     time.Time
		Resources     []struct {
			Key   string
			Value map[string]any
		}
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	if v.Version != set.Version() || v.Hash != set.Version() || v.AppliedAt.Before(before) || len(v.Resources) != 3 {
		t.Fatalf("/snapshot = %+v, want version and hash %s applied after %s with 3 resources", v, set.Version(), before)
	}
	key := cert.GetPrivateKeyPem()
	for _, form := range []string{string(key), base64.StdEncoding.EncodeToString(key), "PRIVATE KEY", strings.Split(string(key), "\n")[1]} {
		if strings.Contains(body, form) {
			t.Fatalf("/snapshot holds the listener's private key (%.20q...)", form)
		}
	}
	if c := v.Resources[0].Value; v.Resources[0].Key != "certificate/ns/cert" || c["privateKeyPem"] != "[redacted]" ||
		c["certificateChainPem"] != base64.StdEncoding.EncodeToString(cert.GetCertificateChainPem()) {
		t.Errorf("certificate %v, want its chain and a redacted key", c)
	}
	if code, body := get(t, admin+"/debug/pprof/goroutine?debug=1"); code != http.StatusOK || !strings.Contains(body, "goroutine profile") {
		t.Errorf("admin /debug/pprof/goroutine = %d", code)
	}
	for _, path := range []string{"/snapshot", "/debug/pprof/"} {
		if code, body := get(t, health+path); code != http.StatusNotFound {
			t.Errorf("health address %s = %d %.80q, want 404", path, code, body)
		}
	}
}

// Tests that without --admin-pprof the admin port serves no profiles.
func TestAdminPortProfilesAreOffByDefault(t *testing.T) {
	t.Parallel()
	p := startAdminProxy(t, "--admin-address=127.0.0.1:0")
	if code, _ := get(t, "http://"+p.admin.Addr().String()+"/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without --admin-pprof = %d, want 404", code)
	}
}

// Tests that an admin port on every interface starts only with a token file, and then answers
// 401 without the token or with another, and 200 with it.
func TestAdminPortOffTheLoopbackNeedsAToken(t *testing.T) {
	t.Parallel()
	if _, err := parseFlags([]string{"--admin-address=0.0.0.0:0", "--node-id=n"}); err == nil || !strings.Contains(err.Error(), "needs a bearer token") {
		t.Fatalf("an admin port on every interface without a token: %v", err)
	}
	token := filepath.Join(t.TempDir(), "admin-token")
	const secret = "Zm9vYmFyYmF6cXV4MDEyMzQ1Njc4OWFiY2RlZg=="
	if err := os.WriteFile(token, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startAdminProxy(t, "--admin-address=0.0.0.0:0", "--admin-token-file="+token)
	applyTLSSet(t, p)
	url := "http://" + strings.Replace(p.admin.Addr().String(), "0.0.0.0", "127.0.0.1", 1) + "/snapshot"
	for auth, want := range map[string]int{"": http.StatusUnauthorized, "Bearer wrong": http.StatusUnauthorized, "Bearer " + secret: http.StatusOK} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Authorization %.12q... = %d, want %d", auth, resp.StatusCode, want)
		}
	}
}
