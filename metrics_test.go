package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"coxswain.dev/coxswain/discovery/wellknown"
)

// testMetric is registered so a scrape that reaches the metrics can be told from one that does not.
const testMetric = "coxswain_metrics_endpoint_test_total"

// Tests that the controller's metrics, which name every dedicated Gateway, are served only over
// HTTPS and only to a bearer token the API server authenticates and authorizes for get on
// /metrics, checked with nothing but the RBAC the install gives the controller for it
// (config/rbac/metrics_auth_role.yaml) and a scraper (metrics_reader_role.yaml).
func TestMetricsNeedAnAuthorizedToken(t *testing.T) {
	admin := kubernetes.NewForConfigOrDie(cfg)
	ns := wellknown.InstallNamespace
	installMetricsRBAC(t, admin, ns)
	scraper := serviceAccountToken(t, admin, ns, "metrics-scraper")
	bindMetricsReader(t, admin, ns, "metrics-scraper")
	nobody := serviceAccountToken(t, admin, ns, "metrics-nobody")

	counter := prometheus.NewCounter(prometheus.CounterOpts{Name: testMetric, Help: "Scrapes of the metrics endpoint test."})
	if err := crmetrics.Registry.Register(counter); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { crmetrics.Registry.Unregister(counter) })
	flags := metricsFlags{addr: freeLoopbackAddress(t), secure: true}
	startMetricsServer(t, &flags, operatorConfig(ns))

	https := "https://" + flags.addr + "/metrics"
	tests := []struct {
		name, url, token string
		want             int
	}{
		{"plain HTTP is not served", "http://" + flags.addr + "/metrics", scraper, http.StatusBadRequest},
		{"no token is refused", https, "", http.StatusUnauthorized},
		// The TokenReview answers a token that does not verify with an error, which the filter
		// turns into a 500.
		{"a forged token is refused", https, "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln", http.StatusInternalServerError},
		{"a ServiceAccount without the metrics-reader role is forbidden", https, nobody, http.StatusForbidden},
		{"a ServiceAccount with the metrics-reader role reads the metrics", https, scraper, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := scrape(t, tt.url, tt.token)
			if code != tt.want {
				t.Fatalf("GET %s: status %d, want %d\n%s", tt.url, code, tt.want, body)
			}
			if got := strings.Contains(body, testMetric); got != (tt.want == http.StatusOK) {
				t.Errorf("GET %s with status %d: the metrics were served = %v", tt.url, code, got)
			}
		})
	}
}

// Tests that plain HTTP metrics are refused on any address but loopback, and that the default
// is HTTPS behind the authentication and authorization filter.
func TestPlainMetricsOnlyOnLoopback(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr string
		ok   bool
	}{
		{":8080", false},
		{"0.0.0.0:8080", false},
		{"[::]:8080", false},
		{"10.0.0.1:8080", false},
		{"example.com:8080", false},
		{"127.0.0.1:8080", true},
		{"127.0.0.2:8080", true},
		{"[::1]:8080", true},
		{"localhost:8080", true},
		{"0", true}, // disabled
	}
	for _, tt := range tests {
		_, err := (&metricsFlags{addr: tt.addr}).options()
		if tt.ok != (err == nil) || (err != nil && !errors.Is(err, errPlainMetrics)) {
			t.Errorf("plain metrics on %q: error %v, want allowed = %v", tt.addr, err, tt.ok)
		}
	}
	o := parseFlags(flag.NewFlagSet("coxswain", flag.ContinueOnError), nil)
	opts, err := o.metrics.options()
	if err != nil || !opts.SecureServing || opts.FilterProvider == nil || opts.BindAddress != ":8443" {
		t.Errorf("default metrics options = %+v, %v; want HTTPS on :8443 with the authorization filter", opts, err)
	}
}

// installMetricsRBAC creates the install namespace, the controller's ServiceAccount and the
// metrics RBAC of config/rbac.
func installMetricsRBAC(t *testing.T, admin kubernetes.Interface, ns string) {
	t.Helper()
	ctx := t.Context()
	created(t, "namespace", func() error {
		_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		return err
	})
	created(t, "controller ServiceAccount", func() error {
		_, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: wellknown.ControllerServiceAccount}}, metav1.CreateOptions{})
		return err
	})
	for _, name := range []string{"metrics_auth_role.yaml", "metrics_reader_role.yaml"} {
		role := &rbacv1.ClusterRole{}
		readYAML(t, filepath.Join("config", "rbac", name), role)
		created(t, name, func() error {
			_, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
			return err
		})
	}
	binding := &rbacv1.ClusterRoleBinding{}
	readYAML(t, filepath.Join("config", "rbac", "metrics_auth_role_binding.yaml"), binding)
	created(t, "metrics_auth_role_binding.yaml", func() error {
		_, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
		return err
	})
}

// bindMetricsReader binds the coxswain-metrics-reader ClusterRole to a ServiceAccount.
func bindMetricsReader(t *testing.T, admin kubernetes.Interface, ns, sa string) {
	t.Helper()
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: sa},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "coxswain-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}},
	}
	created(t, "metrics reader binding", func() error {
		_, err := admin.RbacV1().ClusterRoleBindings().Create(t.Context(), binding, metav1.CreateOptions{})
		return err
	})
}

// serviceAccountToken creates a ServiceAccount and returns a token of it.
func serviceAccountToken(t *testing.T, admin kubernetes.Interface, ns, sa string) string {
	t.Helper()
	created(t, "ServiceAccount "+sa, func() error {
		_, err := admin.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
		return err
	})
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token of %s: %v", sa, err)
	}
	return tr.Status.Token
}

// operatorConfig reaches the API server as the controller's ServiceAccount.
func operatorConfig(ns string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + wellknown.ControllerServiceAccount,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	return c
}

// startMetricsServer runs the metrics server flags describe until the test ends, and waits
// until it answers.
func startMetricsServer(t *testing.T, flags *metricsFlags, c *rest.Config) {
	t.Helper()
	opts, err := flags.options()
	if err != nil {
		t.Fatal(err)
	}
	httpClient, err := rest.HTTPClientFor(c)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := metricsserver.NewServer(opts, c, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("metrics server: %v", err)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", flags.addr, time.Second)
		if err == nil {
			_ = conn.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the metrics server never listened on %s: %v", flags.addr, err)
		}
		time.Sleep(50 * time.Millisecond) // polling for the listener, with the deadline above
	}
}

// scrape GETs url with token as bearer, and returns the status and body (status 0 when no
// answer came; the error is appended to the body).
func scrape(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		Proxy: nil,
		// The endpoint serves a self-signed certificate made at start: the test is of who may
		// read, not of the server's identity.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, //nolint:gosec // see above
	}}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close() //nolint:errcheck // read to the end below
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, string(body) + "\n" + err.Error()
	}
	return resp.StatusCode, string(body)
}

func freeLoopbackAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(raw, into); err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
}

// created runs create and fails the test on any error but AlreadyExists.
func created(t *testing.T, what string, create func() error) {
	t.Helper()
	if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create %s: %v", what, err)
	}
}
