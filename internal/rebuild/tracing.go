package rebuild

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"coxswain.dev/coxswain/discovery/server/cache"
)

// instrumentation names the spans of the rebuild pipeline.
const instrumentation = "coxswain.dev/coxswain/internal/rebuild"

// phase starts a span of one step of a rebuild under ctx's span. Without a recording span in
// ctx (tracing off, or the rebuild not sampled) it costs a no-op span.
func phase(ctx context.Context, name string) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, parent
	}
	return parent.TracerProvider().Tracer(instrumentation).Start(ctx, name)
}

// StartRebuild starts the span of one rebuild, triggered by t with changes seen since since,
// when tr is not nil; it returns ctx unchanged and a no-op span otherwise. EndRebuild ends it.
func StartRebuild(ctx context.Context, tr trace.Tracer, t Trigger, since time.Time) (context.Context, trace.Span) {
	if tr == nil {
		return ctx, trace.SpanFromContext(context.Background())
	}
	attrs := []attribute.KeyValue{attribute.String("coxswain.trigger", t.Label())}
	if !since.IsZero() {
		attrs = append(attrs, attribute.String("coxswain.changes_since", since.UTC().Format(time.RFC3339Nano)))
	}
	return tr.Start(ctx, "rebuild", trace.WithAttributes(attrs...))
}

// EndRebuild ends a rebuild's span with what it changed, or its error.
func EndRebuild(span trace.Span, res Result, err error) {
	if span.IsRecording() {
		span.SetAttributes(
			attribute.Int("coxswain.scopes", len(res.Scopes)), attribute.Int("coxswain.scopes_changed", len(res.Changed)),
			attribute.Int("coxswain.scopes_removed", len(res.Removed)), attribute.Int("coxswain.scopes_failed", len(res.Failed)),
		)
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// TraceConvergence returns the stream listener's OnConverged hook that records, for each version
// published by a traced rebuild, a span "converge" under that rebuild's span: from the version's
// Set in the cache to the acknowledgement of the last live proxy of its scope.
func TraceConvergence(tr trace.Tracer) func(cache.Scope, *cache.Snapshot, time.Time) {
	return func(scope cache.Scope, snap *cache.Snapshot, lastAck time.Time) {
		ctx := snap.TraceContext()
		if ctx == nil || !trace.SpanContextFromContext(ctx).IsSampled() {
			return
		}
		_, span := tr.Start(ctx, "converge", trace.WithTimestamp(snap.CreatedAt()), trace.WithAttributes(
			attribute.String("coxswain.scope", scope.String()), attribute.String("coxswain.version", snap.Version()),
		))
		span.End(trace.WithTimestamp(lastAck))
	}
}
