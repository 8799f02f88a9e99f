package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"go.uber.org/goleak"

	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/proxy/internal/admin"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
	"coxswain.dev/coxswain/proxy/internal/resource"
	"coxswain.dev/coxswain/proxy/internal/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// serve runs an admin server for o on the loopback until the test ends, and returns its base URL.
func serve(t *testing.T, o admin.Options) string {
	t.Helper()
	if o.Address == "" {
		o.Address = "127.0.0.1:0"
	}
	if o.Applied == nil {
		o.Applied = func() *admin.Applied { return nil }
	}
	o.Log = testr.New(t)
	s, err := admin.Listen(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	t.Cleanup(func() {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve = %v", err)
		}
	})
	return "http://" + s.Addr().String()
}

// response is what a request got.
type response struct {
	code   int
	header http.Header
	body   string
}

// do sends method to url with header fields of alternating names and values.
func do(t *testing.T, method, url string, body io.Reader, fields ...string) response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(fields); i += 2 {
		if strings.EqualFold(fields[i], "Host") {
			req.Host = fields[i+1]
			continue
		}
		req.Header.Set(fields[i], fields[i+1])
	}
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header, string(b)}
}

func get(t *testing.T, url string, fields ...string) response {
	t.Helper()
	return do(t, http.MethodGet, url, nil, fields...)
}

// storedSet returns a set at its content hash, as the controller versions sets.
func storedSet(t *testing.T) *resource.Set {
	t.Helper()
	cert, _ := snaptest.Certificate(t, "ns/cert", "app.example.com")
	resources := snaptest.Resources(t, cert, snaptest.HTTP("ns/gw", 80, snaptest.VHost("web", "", snaptest.Route("ns/web/0/0", "", snaptest.Prefix("/"), "ns/app:80"))),
		snaptest.Cluster(t, "ns/app:80", "10.0.0.1:8080"))
	hashed, err := cache.NewSnapshot(resources, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	set, err := resource.NewSet(hashed.Version(), resources)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// Tests that /snapshot answers 503 before any set is applied, then shows the set the data plane
// took (a store, here) with the time it took it, and keeps showing it when the next set is
// refused; the response is JSON, never cached, and ?resource= picks one resource.
func TestSnapshotShowsWhatWasApplied(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 16, 40, 0, 0, time.UTC)
	rec := admin.NewRecorder(store.New(testr.New(t)), func() time.Time { return now })
	base := serve(t, admin.Options{Applied: rec.Applied})

	if r := get(t, base+"/snapshot"); r.code != http.StatusServiceUnavailable || !strings.Contains(r.body, "no snapshot applied yet") {
		t.Fatalf("/snapshot before any apply = %d %s", r.code, r.body)
	}
	set := storedSet(t)
	if err := rec.Apply(t.Context(), set); err != nil {
		t.Fatal(err)
	}
	refused, err := resource.NewSet("", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Apply(t.Context(), refused); !errors.Is(err, store.ErrNoVersion) {
		t.Fatalf("applying a set without a version: %v", err)
	}

	r := get(t, base+"/snapshot")
	if r.code != http.StatusOK || r.header.Get("Content-Type") != "application/json" || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("/snapshot = %d, Content-Type %q, Cache-Control %q: %s", r.code, r.header.Get("Content-Type"), r.header.Get("Cache-Control"), r.body)
	}
	var v struct {
		Version, Hash string
		AppliedAt     time.Time
		Resources     []struct{ Key, Type string }
	}
	if err := json.Unmarshal([]byte(r.body), &v); err != nil {
		t.Fatal(err)
	}
	if v.Version != set.Version() || v.Hash != set.Version() || !v.AppliedAt.Equal(now) || len(v.Resources) != 3 ||
		v.Resources[0].Key != "certificate/ns/cert" || v.Resources[0].Type != "coxswain.discovery.v1.Certificate" {
		t.Fatalf("/snapshot = %+v, want version and hash %s applied at %s with 3 resources", v, set.Version(), now)
	}
	if strings.Contains(r.body, "PRIVATE KEY") || !strings.Contains(r.body, `"privateKeyPem": "[redacted]"`) {
		t.Errorf("/snapshot shows a private key:\n%s", r.body)
	}

	one := get(t, base+"/snapshot?resource=cluster/ns/app:80")
	if one.code != http.StatusOK || strings.Count(one.body, `"key"`) != 1 || !strings.Contains(one.body, `"key": "cluster/ns/app:80"`) {
		t.Errorf("/snapshot?resource=cluster/ns/app:80 = %d %s", one.code, one.body)
	}
	if r := get(t, base+"/snapshot?resource=cluster/ns/gone:80"); r.code != http.StatusNotFound || !strings.Contains(r.body, "no such resource") {
		t.Errorf("an absent resource = %d %s", r.code, r.body)
	}
}

// Tests that GET / lists the endpoints, /debug/pprof/ among them only with Pprof, and that
// anything else is a JSON 404.
func TestIndexAndPprof(t *testing.T) {
	t.Parallel()
	plain, profiled := serve(t, admin.Options{}), serve(t, admin.Options{Pprof: true})
	for _, tt := range []struct {
		url  string
		code int
		has  string
	}{
		{plain + "/", http.StatusOK, `"path": "/snapshot"`},
		{plain + "/debug/pprof/", http.StatusNotFound, "no such endpoint"},
		{plain + "/debug/pprof/goroutine?debug=1", http.StatusNotFound, "no such endpoint"},
		{plain + "/healthz", http.StatusNotFound, "no such endpoint"},
		{profiled + "/", http.StatusOK, `"path": "/debug/pprof/"`},
		{profiled + "/debug/pprof/", http.StatusOK, "goroutine"},
		{profiled + "/debug/pprof/goroutine?debug=1", http.StatusOK, "goroutine profile: total"},
		{profiled + "/debug/pprof/cmdline", http.StatusOK, ""},
	} {
		r := get(t, tt.url)
		if r.code != tt.code || !strings.Contains(r.body, tt.has) || r.header.Get("Cache-Control") != "no-store" {
			t.Errorf("GET %s = %d (Cache-Control %q) %q, want %d with %q", tt.url, r.code, r.header.Get("Cache-Control"), r.body, tt.code, tt.has)
		}
	}
	if r := get(t, plain+"/"); strings.Contains(r.body, "pprof") {
		t.Errorf("the index without Pprof lists the profiles: %s", r.body)
	}
}

// Tests that the admin port is read-only: any method but GET and HEAD gets 405 with Allow, a
// request with a body 413, and HEAD the head of GET.
func TestOnlyGetAndHead(t *testing.T) {
	t.Parallel()
	base := serve(t, admin.Options{Pprof: true})
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions} {
		for _, path := range []string{"/snapshot", "/debug/pprof/symbol"} {
			r := do(t, method, base+path, nil)
			if r.code != http.StatusMethodNotAllowed || r.header.Get("Allow") != "GET, HEAD" || r.header.Get("Content-Type") != "application/json" {
				t.Errorf("%s %s = %d, Allow %q", method, path, r.code, r.header.Get("Allow"))
			}
		}
	}
	if r := do(t, http.MethodGet, base+"/snapshot", strings.NewReader("x")); r.code != http.StatusRequestEntityTooLarge {
		t.Errorf("GET with a body = %d %s", r.code, r.body)
	}
	if r := do(t, http.MethodHead, base+"/", nil); r.code != http.StatusOK || r.body != "" || r.header.Get("Content-Type") != "application/json" {
		t.Errorf("HEAD / = %d %q", r.code, r.body)
	}
}

// Tests that without a token a request must name a local Host: a web page that points a name
// of its own at the loopback (DNS rebinding) reaches a port-forward, but with its own name.
func TestWithoutATokenTheHostMustBeLocal(t *testing.T) {
	t.Parallel()
	base := serve(t, admin.Options{})
	for host, code := range map[string]int{
		"localhost:9901": http.StatusOK, "LOCALHOST": http.StatusOK, "127.0.0.1:9901": http.StatusOK, "[::1]:9901": http.StatusOK,
		"evil.example:9901": http.StatusForbidden, "localhost.evil.example": http.StatusForbidden,
	} {
		if r := get(t, base+"/", "Host", host); r.code != code {
			t.Errorf("Host %s = %d %s, want %d", host, r.code, r.body, code)
		}
	}
}

// Tests that an admin address off the loopback is refused without a token file, and that a
// token file that is missing or too short is refused at start.
func TestListenRefusals(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		address, tokenFile, want string
	}{
		{"0.0.0.0:0", "", "not a loopback address"},
		{":0", "", "not a loopback address"},
		{"[::]:0", "", "not a loopback address"},
		{"10.0.0.1:9901", "", "not a loopback address"},
		{"admin.example:9901", "", "not a loopback address"},
		{"127.0.0.1", "", "missing port"},
		{"127.0.0.1:0", filepath.Join(dir, "absent"), "no such file"},
		{"0.0.0.0:0", short, "shorter than 32 bytes"},
	} {
		_, err := admin.Listen(t.Context(), admin.Options{Address: tt.address, TokenFile: tt.tokenFile, Log: testr.New(t)})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Listen(%s, token file %q) = %v, want an error containing %q", tt.address, tt.tokenFile, err, tt.want)
		}
		if strings.Contains(tt.want, "loopback") && !errors.Is(err, admin.ErrNotLoopback) {
			t.Errorf("Listen(%s) = %v, want %v", tt.address, err, admin.ErrNotLoopback)
		}
	}
}

// Tests the bearer token: off the loopback, every endpoint answers 401 without it, with
// another token or another scheme, and serves with it; a rotated file takes effect at the next
// request, and a file that went missing refuses everything.
func TestBearerToken(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "token")
	const token, rotated = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210-2"
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := serve(t, admin.Options{Address: "0.0.0.0:0", TokenFile: path, Pprof: true})
	base = strings.Replace(base, "0.0.0.0", "127.0.0.1", 1)
	for _, path := range []string{"/", "/snapshot", "/debug/pprof/", "/absent"} {
		for name, fields := range map[string][]string{
			"no token":         nil,
			"a wrong token":    {"Authorization", "Bearer " + token[:len(token)-1] + "0"},
			"a longer token":   {"Authorization", "Bearer " + token + "0"},
			"another scheme":   {"Authorization", "Basic " + token},
			"the bare token":   {"Authorization", token},
			"an empty bearer:": {"Authorization", "Bearer "},
		} {
			r := get(t, base+path, fields...)
			if r.code != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") != `Bearer realm="coxswain-proxy-admin"` || strings.Contains(r.body, "snapshot") {
				t.Errorf("GET %s with %s = %d %q", path, name, r.code, r.body)
			}
		}
	}
	if r := do(t, http.MethodPost, base+"/snapshot", nil); r.code != http.StatusUnauthorized {
		t.Errorf("POST without a token = %d, want 401 before anything else", r.code)
	}
	if r := get(t, base+"/", "Authorization", "bearer "+token, "Host", "proxy.example"); r.code != http.StatusOK {
		t.Errorf("GET / with the token = %d %s", r.code, r.body)
	}
	if r := get(t, base+"/debug/pprof/", "Authorization", "Bearer "+token); r.code != http.StatusOK {
		t.Errorf("GET /debug/pprof/ with the token = %d", r.code)
	}

	if err := os.WriteFile(path, []byte(rotated), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := get(t, base+"/", "Authorization", "Bearer "+token); r.code != http.StatusUnauthorized {
		t.Errorf("the old token after rotation = %d", r.code)
	}
	if r := get(t, base+"/", "Authorization", "Bearer "+rotated); r.code != http.StatusOK {
		t.Errorf("the new token after rotation = %d %s", r.code, r.body)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if r := get(t, base+"/", "Authorization", "Bearer "+rotated); r.code != http.StatusServiceUnavailable || strings.Contains(r.body, path) {
		t.Errorf("with the token file gone = %d %s, want 503 that names no path", r.code, r.body)
	}
}

// Tests the admin server's bounds on the real listener: a client that never finishes its header
// is cut at the header timeout, and a header beyond the limit is refused with 431.
func TestSlowAndLargeHeadersAreCut(t *testing.T) {
	t.Parallel()
	base := serve(t, admin.Options{})
	addr := strings.TrimPrefix(base, "http://")

	slow, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = slow.Close() }()
	start := time.Now()
	if _, err := io.WriteString(slow, "GET /snapshot HTTP/1.1\r\nHost: localhost\r\n"); err != nil {
		t.Fatal(err)
	}
	if err := slow.SetReadDeadline(start.Add(admin.ReadHeaderTimeout + 3*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(slow); err != nil {
		t.Fatalf("the slow client was not cut within the header timeout and 3 s: %v", err)
	}
	if took := time.Since(start); took < admin.ReadHeaderTimeout-time.Second {
		t.Errorf("the slow client was cut after %s, before the %s header timeout", took, admin.ReadHeaderTimeout)
	}

	r := get(t, base+"/", "X-Padding", strings.Repeat("x", admin.MaxHeaderBytes+4096))
	if r.code != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a header of %d bytes = %d", admin.MaxHeaderBytes+4096, r.code)
	}
}
