package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/proxy/internal/dataplane/accesslog"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestParseFlagsRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"a Gateway namespace without a name is refused", []string{"--gateway-namespace=prod"}, "go together"},
		{"a Gateway name without a namespace is refused", []string{"--gateway-name=web"}, "go together"},
		{"an endpoint without a port is refused", []string{"--discovery-endpoint=controller"}, "--discovery-endpoint"},
		{"stray arguments are refused", []string{"serve"}, "unexpected arguments"},
		{"an unknown flag is refused", []string{"--insecure"}, "not defined"},
		{"a zero connection limit is refused", []string{"--max-connections=0"}, "--max-connections must be positive"},
		{"a zero UDP flow share of a client is refused", []string{"--max-udp-flows-per-client=0"}, "--max-udp-flows-per-client must be positive"},
		{"a negative send timeout is refused", []string{"--send-timeout=-1s"}, "--send-timeout must be positive"},
		{"a negative body limit is refused", []string{"--max-request-body-bytes=-1"}, "must not be negative"},
		{"an unknown access log format is refused", []string{"--access-log-format=xml"}, "--access-log-format"},
		{"a tracing endpoint without a scheme is refused", []string{"--tracing-endpoint=collector:4317"}, "--tracing-*"},
		{"an unknown tracing protocol is refused", []string{"--tracing-endpoint=http://c:4317", "--tracing-protocol=zipkin"}, "--tracing-*"},
		{"a sampling ratio over one is refused", []string{"--tracing-endpoint=http://c:4317", "--tracing-sampling-ratio=2"}, "--tracing-*"},
		{"an unknown access log field is refused", []string{"--access-log-fields=status,cookie"}, "--access-log-fields"},
		{"an access log field named twice is refused", []string{"--access-log-fields=status,status"}, "named twice"},
		{"a zero access log queue is refused", []string{"--access-log-queue-size=0"}, "--access-log-queue-size must be positive"},
		{"a request ID header that is no field name is refused", []string{"--request-id-header=X Id"}, "not a field name"},
		{"a request ID header the proxy frames is refused", []string{"--request-id-header=content-length"}, "the proxy manages"},
		{"a request ID header the proxy sets is refused", []string{"--request-id-header=X-Forwarded-For"}, "the proxy manages"},
		{"an admin address on every interface without a token is refused", []string{"--admin-address=:9901"}, "--admin-address: admin address \":9901\": the admin address is not a loopback address, and no --admin-token-file guards it"},
		{"an admin address on the pod's IP without a token is refused", []string{"--admin-address=10.1.2.3:9901"}, "not a loopback address"},
		{"an admin token without an admin address is refused", []string{"--admin-address=", "--admin-token-file=/etc/token"}, "need an --admin-address"},
		{"admin profiles without an admin address are refused", []string{"--admin-address=", "--admin-pprof"}, "need an --admin-address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseFlags(tt.args)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("parseFlags(%q) = %v, want an error containing %q", tt.args, err, tt.want)
			}
		})
	}
}

// Tests that the access log flags reach the data plane's options: the format, the fields in
// their order, the queue, and the request ID header (empty turns IDs off).
func TestParseFlagsAccessLog(t *testing.T) {
	t.Setenv("POD_NAME", "shared-proxy-7d9f")
	o, err := parseFlags([]string{
		"--access-log-format=text", "--access-log-fields=status, requestID", "--access-log-queue-size=16",
		"--request-id-header=x-correlation-id", "--request-id-replace",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := accesslog.Options{Format: accesslog.FormatText, Fields: []accesslog.Field{accesslog.FieldStatus, accesslog.FieldRequestID}, QueueSize: 16}
	if diff := cmp.Diff(want, o.accessLog.opts); diff != "" || o.accessLog.requestIDHeader != "x-correlation-id" || !o.accessLog.replaceIDs {
		t.Errorf("access log options (-want +got):\n%s\nrequest ID header %q, replace %v", diff, o.accessLog.requestIDHeader, o.accessLog.replaceIDs)
	}
	o, err = parseFlags([]string{"--request-id-header="})
	if err != nil || o.accessLog.requestIDHeader != "" || len(o.accessLog.opts.Fields) != len(accesslog.FieldNames()) {
		t.Errorf("defaults with IDs off: %+v, %v", o.accessLog, err)
	}
}

// Tests that the access log fields and formats the operator's API accepts (the enums of
// api/v1alpha1, which the provisioner passes to --access-log-fields and --access-log-format)
// are the proxy's, in its order: a field the API lets through and the proxy refuses would stop
// every proxy the operator provisions with it.
func TestAccessLogEnumsAreTheAPIs(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(filepath.Join("..", "api", "v1alpha1", "coxswainconfig_types.go"))
	if err != nil {
		t.Fatal(err)
	}
	enum := func(typ string) []string {
		m := regexp.MustCompile(`(?m)^// \+kubebuilder:validation:Enum=(\S+)\ntype ` + typ + ` string$`).FindSubmatch(src)
		if m == nil {
			t.Fatalf("no Enum marker on type %s", typ)
		}
		return strings.Split(string(m[1]), ";")
	}
	if diff := cmp.Diff(accesslog.FieldNames(), enum("AccessLogField")); diff != "" {
		t.Errorf("AccessLogField enum (-proxy +API):\n%s", diff)
	}
	for _, f := range enum("AccessLogFormat") {
		if _, err := accesslog.ParseFormat(f); err != nil {
			t.Errorf("the API's format %q: %v", f, err)
		}
	}
}

func TestParseFlagsDefaults(t *testing.T) {
	t.Setenv("POD_NAME", "shared-proxy-7d9f")
	o, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.streamAddress != "coxswain-discovery.coxswain-system.svc:50051" ||
		o.bootstrapAddress != "coxswain-discovery.coxswain-system.svc:50052" {
		t.Fatalf("endpoints %s and %s", o.streamAddress, o.bootstrapAddress)
	}
	if o.tokenPath != wellknown.TokenPath || o.trustBundlePath != wellknown.TrustBundlePath {
		t.Fatalf("paths %s and %s", o.tokenPath, o.trustBundlePath)
	}
	if o.admin != (adminPort{address: "127.0.0.1:9901"}) {
		t.Fatalf("admin port %+v, want 127.0.0.1:9901 without a token or profiles", o.admin)
	}
	if !o.scope().SharedPool {
		t.Fatalf("scope %s, want the shared pool", o.scope())
	}
	if !strings.HasPrefix(o.nodeID, "shared-proxy-7d9f-") || len(o.nodeID) != len("shared-proxy-7d9f-")+8 {
		t.Fatalf("node ID %q", o.nodeID)
	}
	other, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if other.nodeID == o.nodeID {
		t.Fatal("two starts of one pod got the same node ID")
	}

	o, err = parseFlags([]string{"--gateway-namespace=prod", "--gateway-name=web", "--discovery-endpoint=10.0.0.1:7000", "--bootstrap-endpoint=10.0.0.1:7001"})
	if err != nil {
		t.Fatal(err)
	}
	if s := o.scope(); s.SharedPool || s.Namespace != "prod" || s.Name != "web" {
		t.Fatalf("scope %s", s)
	}
}

// Tests that the proxy decides its own sampling unless told its callers are trusted.
func TestParseFlagsTracingParentSampling(t *testing.T) {
	t.Parallel()
	for args, want := range map[string]bool{"": false, "--tracing-trust-parent-sampling": true} {
		flags := []string{"--node-id=n", "--tracing-endpoint=http://c:4317"}
		if args != "" {
			flags = append(flags, args)
		}
		o, err := parseFlags(flags)
		if err != nil {
			t.Fatal(err)
		}
		if got := o.tracing.opts.TrustParentSampling; got != want {
			t.Errorf("flags %q: trust parent sampling %v, want %v", args, got, want)
		}
	}
}

func TestAnIPEndpointNeedsAServerName(t *testing.T) {
	t.Parallel()
	o, err := parseFlags([]string{"--discovery-endpoint=10.0.0.1:7000", "--node-id=n"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newProcess(t.Context(), o, testr.New(t)); err == nil || !strings.Contains(err.Error(), "server name is required") {
		t.Fatalf("newProcess = %v, want a missing server name", err)
	}
}

// Tests that the process serves /healthz and a NotReady /readyz that says why while the
// controller cannot be reached, and shuts down cleanly when its context ends.
func TestRunServesHealthAndShutsDown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o, err := parseFlags([]string{
		"--discovery-endpoint=127.0.0.1:1", "--discovery-server-name=discovery.test", "--node-id=proxy-0",
		"--health-address=127.0.0.1:0", "--token-path=" + filepath.Join(dir, "token"),
		"--trust-bundle-path=" + filepath.Join(dir, "ca.crt"), "--shutdown-timeout=5s", "--drain-period=0",
		"--admin-address=127.0.0.1:0",
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := newProcess(t.Context(), o, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.run(ctx) }()
	base := "http://" + p.lis.Addr().String()

	if code, body := get(t, base+"/healthz"); code != http.StatusOK || body != "ok" {
		t.Fatalf("/healthz = %d %q", code, body)
	}
	var body string
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(body, "read token") {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never named the missing token: %q", body)
		}
		var code int
		code, body = get(t, base+"/readyz")
		if code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "NotReady: ") {
			t.Fatalf("/readyz = %d %q", code, body)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if code, metrics := get(t, base+"/metrics"); code != http.StatusOK || !strings.Contains(metrics, `coxswain_proxy_discovery_state{state="NotReady"} 1`) {
		t.Fatalf("/metrics = %d", code)
	}
	if _, ok := p.plane.Addr(80); ok {
		t.Fatal("a listener is bound before any snapshot")
	}
	if code, body := get(t, "http://"+p.admin.Addr().String()+"/snapshot"); code != http.StatusServiceUnavailable || !strings.Contains(body, "no snapshot applied yet") {
		t.Fatalf("admin /snapshot before any snapshot = %d %q", code, body)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url) //nolint:noctx // a test against a local server
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// Tests that fields with underscores are dropped unless --allow-underscores-in-headers says
// otherwise.
func TestParseFlagsUnderscores(t *testing.T) {
	t.Setenv("POD_NAME", "shared-proxy-7d9f")
	for _, tc := range []struct {
		args []string
		want bool
	}{{nil, false}, {[]string{"--allow-underscores-in-headers"}, true}} {
		o, err := parseFlags(tc.args)
		if err != nil {
			t.Fatal(err)
		}
		if o.allowUnderscores != tc.want {
			t.Errorf("parseFlags(%q): allowUnderscores %v, want %v", tc.args, o.allowUnderscores, tc.want)
		}
	}
}
