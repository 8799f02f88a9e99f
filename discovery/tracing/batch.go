package tracing

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Batching of the ended spans.
const (
	// DefaultQueueSize is the spans that may wait for export.
	DefaultQueueSize = 2048
	// batchInterval is how often the waiting spans are exported.
	batchInterval = time.Second
	// maxExportBatch is the most spans one export carries.
	maxExportBatch = 512
	// exportTimeout bounds one export.
	exportTimeout = 10 * time.Second
)

// batcher is the span processor: an ended, sampled span is appended to a bounded list under a
// lock, and a goroutine exports the list every batchInterval. The SDK's batch processor hands
// each span to its goroutine through a channel, waking it once a span: on the request path that
// wake-up cost more than the span itself (BenchmarkServeTracing). A span that finds the list full
// is dropped and counted, never waited for.
type batcher struct {
	exp     sdktrace.SpanExporter
	max     int
	dropped prometheus.Counter

	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan

	stop chan struct{}
	done chan struct{}
	once sync.Once
	// exporting serializes exports: the loop's, ForceFlush's and Shutdown's.
	exporting sync.Mutex
}

func newBatcher(exp sdktrace.SpanExporter, max int, dropped prometheus.Counter) *batcher {
	b := &batcher{exp: exp, max: max, dropped: dropped, stop: make(chan struct{}), done: make(chan struct{})}
	go b.loop()
	return b
}

func (b *batcher) loop() {
	defer close(b.done)
	t := time.NewTicker(batchInterval)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), exportTimeout)
			_ = b.export(ctx)
			cancel()
		}
	}
}

// export sends every waiting span, in batches of at most maxExportBatch.
func (b *batcher) export(ctx context.Context) error {
	b.exporting.Lock()
	defer b.exporting.Unlock()
	b.mu.Lock()
	spans := b.spans
	b.spans = nil
	b.mu.Unlock()
	for len(spans) > 0 {
		n := min(len(spans), maxExportBatch)
		if err := b.exp.ExportSpans(ctx, spans[:n]); err != nil {
			return err
		}
		spans = spans[n:]
	}
	return nil
}

// OnStart implements sdktrace.SpanProcessor.
func (b *batcher) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd implements sdktrace.SpanProcessor: it keeps s for the next export, or drops it when
// the list is full.
func (b *batcher) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	b.mu.Lock()
	if len(b.spans) >= b.max {
		b.mu.Unlock()
		if b.dropped != nil {
			b.dropped.Inc()
		}
		return
	}
	b.spans = append(b.spans, s)
	b.mu.Unlock()
}

// ForceFlush implements sdktrace.SpanProcessor: it exports the waiting spans now.
func (b *batcher) ForceFlush(ctx context.Context) error { return b.export(ctx) }

// Shutdown implements sdktrace.SpanProcessor: it stops the loop, exports what waits, within
// ctx, and shuts the exporter down.
func (b *batcher) Shutdown(ctx context.Context) error {
	var err error
	b.once.Do(func() {
		close(b.stop)
		<-b.done
		err = b.export(ctx)
		if serr := b.exp.Shutdown(ctx); err == nil {
			err = serr
		}
	})
	return err
}
