package provision

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"coxswain.dev/coxswain/api/v1alpha1"
)

// Tests that a proxy container always has a memory limit, the parameters' or the default one
// with a request of its own, and a GOMEMLIMIT of 90% of that limit.
func TestProxyMemoryLimit(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name                       string
		params                     *corev1.ResourceRequirements
		limit, request, goMemLimit string
	}{
		{"no resources get the default limit and request", nil, "1Gi", "128Mi", "921MiB"},
		{"a limit of the parameters is kept", &corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")},
		}, "2Gi", "", "1843MiB"},
		{"a request alone keeps its request under the default limit", &corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
		}, "1Gi", "256Mi", "921MiB"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := Model{Params: v1alpha1.CoxswainGatewayParametersSpec{Resources: c.params}}
			r := m.resources()
			limit, request := r.Limits[corev1.ResourceMemory], r.Requests[corev1.ResourceMemory]
			if limit.String() != c.limit || c.request != "" && request.String() != c.request {
				t.Errorf("limit %s request %s, want %s and %q", limit.String(), request.String(), c.limit, c.request)
			}
			if got := goMemLimit(r); got.Name != "GOMEMLIMIT" || got.Value != c.goMemLimit {
				t.Errorf("%s=%s, want GOMEMLIMIT=%s", got.Name, got.Value, c.goMemLimit)
			}
		})
	}
}

// Tests that a proxy's access log flags take each field from the parameters when they set it,
// else from the operator's default, and that nothing set asks for no flag.
func TestAccessLogArgs(t *testing.T) {
	t.Parallel()
	text, jsonFormat := ptr.To(v1alpha1.AccessLogFormatText), ptr.To(v1alpha1.AccessLogFormatJSON)
	fields := []v1alpha1.AccessLogField{"status", "requestID"}
	cases := []struct {
		name             string
		defaults, params *v1alpha1.AccessLog
		want             []string
	}{
		{"nothing set asks for no flag", nil, nil, nil},
		{
			"the default applies", &v1alpha1.AccessLog{Format: text, Fields: fields}, nil,
			[]string{"--access-log-format=text", "--access-log-fields=status,requestID"},
		},
		{
			"the parameters' format wins and the default's fields stay", &v1alpha1.AccessLog{Format: text, Fields: fields},
			&v1alpha1.AccessLog{Format: jsonFormat},
			[]string{"--access-log-format=json", "--access-log-fields=status,requestID"},
		},
		{"the parameters alone", nil, &v1alpha1.AccessLog{Fields: []v1alpha1.AccessLogField{"path"}}, []string{"--access-log-fields=path"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := Model{Defaults: Defaults{AccessLog: c.defaults}, Params: v1alpha1.CoxswainGatewayParametersSpec{AccessLog: c.params}}
			if got := accessLogArgs(m.accessLog()); !slices.Equal(got, c.want) {
				t.Errorf("args %q, want %q", got, c.want)
			}
		})
	}
}

// Tests the tracing flags of a proxy: none when neither the operator nor the parameters trace,
// the parameters' tracing replacing the default whole, a sampling fraction as a ratio, and
// trusting the callers' sampling decisions only when asked.
func TestTracingArgs(t *testing.T) {
	t.Parallel()
	httpProto := ptr.To(v1alpha1.TracingProtocolHTTP)
	def := &v1alpha1.Tracing{Endpoint: "http://collector.observability:4317", SamplingFraction: &v1alpha1.SamplingFraction{Numerator: 1, Denominator: 1000}}
	params := &v1alpha1.Tracing{Endpoint: "https://otel.example.com/v1/traces", Protocol: httpProto}
	cases := []struct {
		name             string
		defaults, params *v1alpha1.Tracing
		want             []string
	}{
		{"off", nil, nil, nil},
		{"the default", def, nil, []string{"--tracing-endpoint=http://collector.observability:4317", "--tracing-sampling-ratio=0.001"}},
		{"the parameters replace the default", def, params, []string{"--tracing-endpoint=https://otel.example.com/v1/traces", "--tracing-protocol=http/protobuf"}},
		{
			"a percent", nil, &v1alpha1.Tracing{Endpoint: "http://c:4317", SamplingFraction: &v1alpha1.SamplingFraction{Numerator: 25, Denominator: 100}},
			[]string{"--tracing-endpoint=http://c:4317", "--tracing-sampling-ratio=0.25"},
		},
		{
			"trusting the callers' sampling", nil, &v1alpha1.Tracing{Endpoint: "http://c:4317", TrustParentSampling: ptr.To(true)},
			[]string{"--tracing-endpoint=http://c:4317", "--tracing-trust-parent-sampling"},
		},
		{"not trusting them, as by default", nil, &v1alpha1.Tracing{Endpoint: "http://c:4317", TrustParentSampling: ptr.To(false)}, []string{"--tracing-endpoint=http://c:4317"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := Model{Defaults: Defaults{Tracing: c.defaults}, Params: v1alpha1.CoxswainGatewayParametersSpec{Tracing: c.params}}
			if got := tracingArgs(m.tracing()); !slices.Equal(got, c.want) {
				t.Errorf("args %q, want %q", got, c.want)
			}
		})
	}
}
