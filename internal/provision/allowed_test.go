package provision_test

import (
	"testing"

	"coxswain.dev/coxswain/internal/provision"
)

// Tests which tracing endpoints of a Gateway's own parameters the allowed list admits.
func TestTracingEndpointAllowed(t *testing.T) {
	t.Parallel()
	allowed := []string{"https://otel.example:4317", "http://*", "https://*", "http://169.254.10.10:4318", "http://localhost:4318"}
	for _, tc := range []struct {
		name     string
		endpoint string
		allowed  []string
		want     bool
	}{
		{"an exact entry admits its endpoint", "https://otel.example:4317", allowed, true},
		{"a prefix admits a collector's name", "http://collector.tenant.svc:4318", allowed, true},
		{"a prefix admits a cluster address", "http://10.96.0.20:4317/v1/traces", allowed, true},
		{"nothing listed admits nothing", "https://otel.example:4317", nil, false},
		{"an endpoint no entry covers is refused", "grpc://otel.example:4317", allowed, false},
		{"a prefix does not admit the metadata service's address", "http://169.254.169.254:80", allowed, false},
		{"a prefix does not admit another link-local address", "http://169.254.10.10:4317", allowed, false},
		{"a prefix does not admit an IPv6 link-local address", "http://[fe80::1]:4317", allowed, false},
		{"a prefix does not admit a zoned address", "http://[fe80::1%25eth0]:4317", allowed, false},
		{"a prefix does not admit loopback", "http://127.0.0.1:8081", allowed, false},
		{"a prefix does not admit IPv6 loopback", "https://[::1]:4317", allowed, false},
		{"a prefix does not admit IPv4-mapped loopback", "http://[::ffff:127.0.0.1]:4317", allowed, false},
		{"a prefix does not admit the unspecified address", "http://0.0.0.0:4317", allowed, false},
		{"a prefix does not admit a multicast address", "http://224.0.0.1:4317", allowed, false},
		{"a prefix does not admit localhost", "http://localhost:8081", allowed, false},
		{"a prefix does not admit a name under localhost", "http://proxy.localhost:8081", allowed, false},
		{"a prefix does not admit the GCE metadata name", "http://metadata.google.internal:80", allowed, false},
		{"a prefix does not admit it with a trailing dot", "http://METADATA.google.internal.:80", allowed, false},
		{"a prefix does not admit the AWS IPv6 metadata address", "http://[fd00:ec2::254]:80", allowed, false},
		{"a prefix does not admit the Alibaba metadata address", "http://100.100.100.200:80", allowed, false},
		{"a prefix does not admit a decimal address", "http://2852039166:80", allowed, false},
		{"a prefix does not admit a short address", "http://127.1:8081", allowed, false},
		{"a prefix does not admit a hexadecimal address", "http://0x7f.0.0.1:8081", allowed, false},
		{"a prefix does not admit an octal address", "http://0177.0.0.1:8081", allowed, false},
		{"a prefix does not admit a metadata address behind user info", "http://otel.example@169.254.169.254:80", allowed, false},
		{"an exact entry admits a link-local address", "http://169.254.10.10:4318", allowed, true},
		{"an exact entry admits localhost", "http://localhost:4318", allowed, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := provision.TracingEndpointAllowed(tc.endpoint, tc.allowed); got != tc.want {
				t.Errorf("TracingEndpointAllowed(%q) = %v, want %v", tc.endpoint, got, tc.want)
			}
		})
	}
}

// Tests that an endpoint's password never reaches an event or a log line.
func TestRedactedEndpoint(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"https://user:secret@otel.example:4317": "https://user:xxxxx@otel.example:4317",
		"http://otel.example:4317/v1/traces":    "http://otel.example:4317/v1/traces",
		"http://%zz":                            "(an endpoint that is not a URL)",
	} {
		if got := provision.RedactedEndpoint(in); got != want {
			t.Errorf("RedactedEndpoint(%q) = %q, want %q", in, got, want)
		}
	}
}
