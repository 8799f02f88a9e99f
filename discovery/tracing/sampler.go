package tracing

import (
	"fmt"
	"math/rand/v2"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// sampler decides which spans are recorded: a trace started here by its (random) trace ID
// against opts.SamplingRatio, a span under a local parent as its parent is; under a remote
// parent (a request's traceparent) as the parent is when opts.TrustParentSampling, else by a
// random draw against the ratio, which neither the parent's sampled flag nor its trace ID
// (which the caller chose) can sway.
func sampler(opts Options) sdktrace.Sampler {
	root := sdktrace.TraceIDRatioBased(opts.SamplingRatio)
	if opts.TrustParentSampling {
		return sdktrace.ParentBased(root)
	}
	untrusted := randomSampler{ratio: opts.SamplingRatio}
	return sdktrace.ParentBased(root, sdktrace.WithRemoteParentSampled(untrusted), sdktrace.WithRemoteParentNotSampled(untrusted))
}

// randomSampler records a span with the probability ratio.
type randomSampler struct{ ratio float64 }

func (s randomSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	decision := sdktrace.Drop
	if s.ratio > 0 && rand.Float64() < s.ratio { //nolint:gosec // a sampling draw, not a key
		decision = sdktrace.RecordAndSample
	}
	return sdktrace.SamplingResult{Decision: decision, Tracestate: trace.SpanContextFromContext(p.ParentContext).TraceState()}
}

func (s randomSampler) Description() string { return fmt.Sprintf("RandomRatio{%g}", s.ratio) }
