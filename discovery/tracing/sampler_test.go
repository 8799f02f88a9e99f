package tracing

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Tests the sampling decisions, parent by parent: a remote parent (a request's traceparent)
// decides only when trusted, whatever its flag and trace ID; a local parent (the binary's own
// span) always decides; a root is the ratio's.
func TestSampler(t *testing.T) {
	t.Parallel()
	// Low 64 bits of 1: under the threshold of any ratio above zero for a sampler hashing it.
	chosen := trace.TraceID{15: 1}
	parent := func(remote, sampled bool) context.Context {
		flags := trace.TraceFlags(0)
		if sampled {
			flags = trace.FlagsSampled
		}
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: chosen, SpanID: trace.SpanID{1}, TraceFlags: flags, Remote: remote})
		return trace.ContextWithSpanContext(context.Background(), sc)
	}
	cases := []struct {
		name   string
		opts   Options
		parent context.Context
		want   sdktrace.SamplingDecision
	}{
		{"a remote sampled parent does not decide at ratio 0", Options{}, parent(true, true), sdktrace.Drop},
		{"a remote parent's chosen trace ID does not decide at a tiny ratio", Options{SamplingRatio: 1e-12}, parent(true, true), sdktrace.Drop},
		{"a remote unsampled parent does not decide at ratio 1", Options{SamplingRatio: 1}, parent(true, false), sdktrace.RecordAndSample},
		{"a trusted remote sampled parent decides at ratio 0", Options{TrustParentSampling: true}, parent(true, true), sdktrace.RecordAndSample},
		{"a trusted remote unsampled parent decides at ratio 1", Options{SamplingRatio: 1, TrustParentSampling: true}, parent(true, false), sdktrace.Drop},
		{"a local sampled parent decides at ratio 0", Options{}, parent(false, true), sdktrace.RecordAndSample},
		{"a root is the ratio's: 0", Options{}, context.Background(), sdktrace.Drop},
		{"a root is the ratio's: 1", Options{SamplingRatio: 1}, context.Background(), sdktrace.RecordAndSample},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := sampler(c.opts)
			for range 100 {
				got := s.ShouldSample(sdktrace.SamplingParameters{ParentContext: c.parent, TraceID: chosen, Name: "GET"})
				if got.Decision != c.want {
					t.Fatalf("decision %v, want %v", got.Decision, c.want)
				}
			}
		})
	}
}
