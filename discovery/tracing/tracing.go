// Package tracing holds the OpenTelemetry tracing of Coxswain's binaries: a tracer exporting
// over OTLP to a collector through a bounded list, and, for the proxy, a server span per request
// and the W3C Trace Context its backends get.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Protocols of the OTLP exporter.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// Header fields of W3C Trace Context, in their canonical form.
const (
	HeaderTraceparent = "Traceparent"
	HeaderTracestate  = "Tracestate"
)

// Service names of the spans of Coxswain's binaries.
const (
	ServiceProxy      = "coxswain-proxy"
	ServiceController = "coxswain-controller"
)

// Options say where spans go and which requests get one.
type Options struct {
	// ServiceName is the service.name of the spans; ServiceProxy when empty.
	ServiceName string
	// Endpoint is the collector's OTLP URL: http://host:port for plaintext, https://host:port
	// for TLS verified against the system roots. For ProtocolHTTP a path may follow (the
	// default is /v1/traces).
	Endpoint string
	// Protocol is ProtocolGRPC or ProtocolHTTP.
	Protocol string
	// SamplingRatio is the share of the requests that are recorded, 0 to 1: of the traces
	// started here, and of those a request's traceparent continues unless TrustParentSampling.
	SamplingRatio float64
	// TrustParentSampling follows the decision of a request's traceparent (its sampled flag)
	// instead of SamplingRatio: for a proxy whose callers are trusted. Off (the edge's
	// default), the caller's trace ID is kept but the proxy decides, at random, so that no
	// client can have its requests recorded by setting the flag or choosing a trace ID.
	TrustParentSampling bool
	// Attributes describe this proxy (its pod and namespace) on every span.
	Attributes []attribute.KeyValue
	// QueueSize bounds the spans waiting for export; spans beyond it are dropped, never
	// waited for on the request path. DefaultQueueSize when zero.
	QueueSize int
	// DroppedSpans, when set, counts the spans dropped because the queue was full.
	DroppedSpans prometheus.Counter
	// Exporter, when set, takes the batches instead of an OTLP exporter of Endpoint (which is
	// then only checked): for benchmarks that count the proxy's part alone.
	Exporter sdktrace.SpanExporter
}

// Check refuses options New would refuse, without connecting anywhere.
func (o *Options) Check() error {
	u, err := url.Parse(o.Endpoint)
	switch {
	case err != nil:
		return fmt.Errorf("endpoint %q: %w", o.Endpoint, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("endpoint %q: the scheme must be http (plaintext) or https", o.Endpoint)
	case u.Host == "":
		return fmt.Errorf("endpoint %q names no host", o.Endpoint)
	case o.Protocol == ProtocolGRPC && u.Path != "" && u.Path != "/":
		return fmt.Errorf("endpoint %q: an OTLP/gRPC endpoint takes no path", o.Endpoint)
	case o.Protocol != ProtocolGRPC && o.Protocol != ProtocolHTTP:
		return fmt.Errorf("protocol %q: use %s or %s", o.Protocol, ProtocolGRPC, ProtocolHTTP)
	case !(o.SamplingRatio >= 0 && o.SamplingRatio <= 1):
		return fmt.Errorf("sampling ratio %v is not between 0 and 1", o.SamplingRatio)
	}
	return nil
}

// Tracer starts the spans of requests and exports them in the background.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TraceContext
}

// New returns a tracer exporting as opts say. Nothing is dialed until the first export, and an
// unreachable collector costs dropped spans, never a request.
func New(opts Options) (*Tracer, error) {
	if err := opts.Check(); err != nil {
		return nil, err
	}
	exp := opts.Exporter
	var err error
	ctx := context.Background()
	switch {
	case exp != nil:
	case opts.Protocol == ProtocolGRPC:
		exp, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(opts.Endpoint))
	default:
		exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(opts.Endpoint))
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	queue := opts.QueueSize
	if queue <= 0 {
		queue = DefaultQueueSize
	}
	service := opts.ServiceName
	if service == "" {
		service = ServiceProxy
	}
	res := resource.NewSchemaless(append([]attribute.KeyValue{attribute.String("service.name", service)}, opts.Attributes...)...)
	provider := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sampler(opts)),
		sdktrace.WithSpanProcessor(newBatcher(exp, queue, opts.DroppedSpans)),
	)
	return &Tracer{provider: provider, tracer: provider.Tracer("coxswain.dev/coxswain/" + service)}, nil
}

// Tracer returns the tracer that starts spans of the binary's own work (the controller's
// rebuilds, say).
func (t *Tracer) Tracer() trace.Tracer { return t.tracer }

// Shutdown exports the spans still queued, within ctx, and stops the tracer.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if err := t.provider.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// Start starts the server span of a request received with header h (its traceparent and
// tracestate, when valid, make the span the caller's child), named after method until the
// route is known.
func (t *Tracer) Start(h http.Header, method string, at time.Time) trace.Span {
	ctx := t.prop.Extract(context.Background(), propagation.HeaderCarrier(h))
	_, span := t.tracer.Start(ctx, method, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(at))
	return span
}

// Inject sets h's traceparent and tracestate to span's, making span the parent of what the
// backend does: the fields the client sent are replaced.
func (t *Tracer) Inject(span trace.Span, h http.Header) {
	delete(h, HeaderTraceparent)
	delete(h, HeaderTracestate)
	t.prop.Inject(trace.ContextWithSpan(context.Background(), span), propagation.HeaderCarrier(h))
}

// End ends a request's span with its status: an error for 5xx, as OpenTelemetry's HTTP server
// conventions say (a 4xx is the client's error, not the server's).
func End(span trace.Span, status int, attrs ...attribute.KeyValue) {
	span.SetAttributes(append(attrs, attribute.Int("http.response.status_code", status))...)
	if status >= 500 {
		span.SetStatus(codes.Error, "")
	}
	span.End()
}
