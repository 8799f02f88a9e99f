package tracing

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// recordingExporter keeps the names of the spans exported, in batches.
type recordingExporter struct {
	mu      sync.Mutex
	batches [][]string
	shut    bool
}

func (e *recordingExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var names []string
	for _, s := range spans {
		names = append(names, s.Name())
	}
	e.batches = append(e.batches, names)
	return nil
}

func (e *recordingExporter) Shutdown(context.Context) error {
	e.mu.Lock()
	e.shut = true
	e.mu.Unlock()
	return nil
}

func (e *recordingExporter) exported() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, b := range e.batches {
		n += len(b)
	}
	return n
}

// endSpans ends n sampled spans of a provider on b.
func endSpans(p *sdktrace.TracerProvider, n int) {
	tr := p.Tracer("test")
	for range n {
		_, s := tr.Start(context.Background(), "span")
		s.End()
	}
}

// Tests that ended spans wait for the next interval and go out together, that the spans beyond
// the queue are dropped and counted rather than waited for, and that Shutdown exports what
// waits and shuts the exporter down.
func TestBatcherExportsEachIntervalAndDropsBeyondTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := &recordingExporter{}
		dropped := prometheus.NewCounter(prometheus.CounterOpts{Name: "dropped"})
		b := newBatcher(exp, 3, dropped)
		p := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b))

		endSpans(p, 5)
		synctest.Wait()
		if n := exp.exported(); n != 0 {
			t.Fatalf("%d spans exported before the interval", n)
		}
		if got := testutil.ToFloat64(dropped); got != 2 {
			t.Errorf("dropped %v spans beyond a queue of 3, want 2", got)
		}
		time.Sleep(batchInterval)
		synctest.Wait()
		if n := exp.exported(); n != 3 || len(exp.batches) != 1 {
			t.Fatalf("after the interval: %d spans in %d batches, want 3 in 1", n, len(exp.batches))
		}

		endSpans(p, 2)
		if err := p.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := exp.exported(); n != 5 || !exp.shut {
			t.Errorf("after Shutdown: %d spans exported (want 5), exporter shut down %t", n, exp.shut)
		}
	})
}

// Tests that a span that is not sampled is never queued.
func TestBatcherSkipsUnsampledSpans(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := &recordingExporter{}
		p := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(newBatcher(exp, 10, nil)), sdktrace.WithSampler(sdktrace.NeverSample()))
		endSpans(p, 4)
		if err := p.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := exp.exported(); n != 0 {
			t.Errorf("%d unsampled spans exported", n)
		}
	})
}

// Tests that Check refuses what the flags must not take.
func TestOptionsCheck(t *testing.T) {
	t.Parallel()
	for _, o := range []Options{
		{Endpoint: "collector:4317", Protocol: ProtocolGRPC, SamplingRatio: 1},
		{Endpoint: "ftp://collector:4317", Protocol: ProtocolGRPC, SamplingRatio: 1},
		{Endpoint: "http://", Protocol: ProtocolGRPC, SamplingRatio: 1},
		{Endpoint: "http://collector:4317/v1/traces", Protocol: ProtocolGRPC, SamplingRatio: 1},
		{Endpoint: "http://collector:4317", Protocol: "thrift", SamplingRatio: 1},
		{Endpoint: "http://collector:4317", Protocol: ProtocolGRPC, SamplingRatio: 1.5},
		{Endpoint: "http://collector:4317", Protocol: ProtocolGRPC, SamplingRatio: -0.1},
	} {
		if err := o.Check(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	for _, o := range []Options{
		{Endpoint: "http://collector:4317", Protocol: ProtocolGRPC, SamplingRatio: 0},
		{Endpoint: "https://otel.example.com:4318/v1/traces", Protocol: ProtocolHTTP, SamplingRatio: 0.25},
	} {
		if err := o.Check(); err != nil {
			t.Errorf("%+v refused: %v", o, err)
		}
	}
}
