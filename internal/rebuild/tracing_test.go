package rebuild

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/internal/scopeauth"
)

// recordingTracer returns a tracer whose ended spans the exporter holds at once.
func recordingTracer() (*tracetest.InMemoryExporter, *sdktrace.TracerProvider) {
	exp := tracetest.NewInMemoryExporter()
	return exp, sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
}

// spanNamed returns the ended span called name, failing the test when there is not exactly one.
func spanNamed(t *testing.T, spans tracetest.SpanStubs, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans named %q, want 1", len(found), name)
	}
	return found[0]
}

// Tests that a traced rebuild makes a span with its trigger and a child per step (graph,
// compile, authority, publish, status on a leader writing status itself), an event per
// version published, and that each published snapshot keeps the rebuild's context, under which
// TraceConvergence records the version's convergence from its Set to the last ACK.
func TestRebuildTracedStepByStep(t *testing.T) {
	t.Parallel()
	exp, provider := recordingTracer()
	tracer := provider.Tracer("test")
	p := &Pipeline{Cache: cache.New(nil), Authority: scopeauth.New(), Status: &countingWriter{}, IsLeader: func() bool { return true }}

	ctx, span := StartRebuild(context.Background(), tracer, Trigger{}, time.Unix(1000, 0))
	res, err := p.Rebuild(ctx, input(t, world))
	EndRebuild(span, res, err)
	if err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	root := spanNamed(t, spans, "rebuild")
	for _, step := range []string{"graph", "compile", "authority", "publish", "status"} {
		s := spanNamed(t, spans, step)
		if s.Parent.SpanID() != root.SpanContext.SpanID() || s.SpanContext.TraceID() != root.SpanContext.TraceID() {
			t.Errorf("span %s is not the rebuild's child", step)
		}
	}
	var published []string
	for _, e := range root.Events {
		if e.Name == "published" {
			for _, a := range e.Attributes {
				if a.Key == "coxswain.scope" {
					published = append(published, a.Value.AsString())
				}
			}
		}
	}
	slices.Sort(published)
	if want := []string{"gateway/prod/web", "shared-pool"}; !slices.Equal(published, want) {
		t.Errorf("published events for %v, want %v", published, want)
	}

	web := cache.Gateway("prod", "web")
	snap := p.Cache.Get(web)
	if snap.TraceContext() == nil {
		t.Fatal("the published snapshot keeps no trace context")
	}
	acked := snap.CreatedAt().Add(40 * time.Millisecond)
	TraceConvergence(tracer)(web, snap, acked)
	conv := spanNamed(t, exp.GetSpans(), "converge")
	if conv.Parent.SpanID() != root.SpanContext.SpanID() {
		t.Error("the convergence span is not the rebuild's child")
	}
	if !conv.StartTime.Equal(snap.CreatedAt()) || !conv.EndTime.Equal(acked) {
		t.Errorf("convergence span from %v to %v, want %v to %v", conv.StartTime, conv.EndTime, snap.CreatedAt(), acked)
	}
}

// Tests that without a tracer a rebuild records nothing and its snapshots carry no trace
// context, and that a failed rebuild's span is an error.
func TestRebuildUntracedAndFailed(t *testing.T) {
	t.Parallel()
	p := &Pipeline{Cache: cache.New(nil), Authority: scopeauth.New(), IsLeader: func() bool { return false }}
	ctx, span := StartRebuild(context.Background(), nil, Trigger{}, time.Time{})
	res, err := p.Rebuild(ctx, input(t, world))
	EndRebuild(span, res, err)
	if err != nil {
		t.Fatal(err)
	}
	if p.Cache.Get(cache.SharedPool()).TraceContext() != nil {
		t.Error("an untraced rebuild's snapshot carries a trace context")
	}

	exp, provider := recordingTracer()
	_, span = StartRebuild(context.Background(), provider.Tracer("test"), Trigger{}, time.Time{})
	EndRebuild(span, Result{}, errors.New("read cluster state: boom"))
	if s := spanNamed(t, exp.GetSpans(), "rebuild"); s.Status.Description != "read cluster state: boom" {
		t.Errorf("failed rebuild span status %+v", s.Status)
	}
}
