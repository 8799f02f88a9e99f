package dataplane_test

import (
	"context"
	"math"
	"net"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"coxswain.dev/coxswain/discovery/tracing"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/forward"
	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
)

// discardExporter takes batches of spans and drops them.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// discardCollector accepts OTLP exports and keeps nothing.
type discardCollector struct {
	collectortrace.UnimplementedTraceServiceServer
}

func (discardCollector) Export(context.Context, *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// BenchmarkServeTracing is BenchmarkServe's exchange (request IDs on, access log off) with
// tracing in each of its settings, for each HTTP/1.1 engine, so that its cost reads as ratios
// of one run: tracing=off is the request path without a tracer, which must not allocate more
// than BenchmarkServe's; ratio=0 starts and propagates a span that is not recorded (the
// request brings no traceparent); ratio=1 records every span and exports it over OTLP/gRPC to a
// collector in this process that discards it, whose CPU cpu-ns/op counts with the exporter's.
func BenchmarkServeTracing(b *testing.B) {
	backendAddr := benchBackend(b)
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, discardCollector{})
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(srv.Stop)
	endpoint := "http://" + ln.Addr().String()
	cases := []struct {
		name     string
		ratio    float64
		on       bool
		exporter sdktrace.SpanExporter
	}{
		{"tracing=off", 0, false, nil},
		{"tracing=on,ratio=0", 0, true, nil},
		{"tracing=on,ratio=1,export=none", 1, true, discardExporter{}},
		{"tracing=on,ratio=1", 1, true, nil},
	}
	for _, e := range http1.Engines {
		for _, tc := range cases {
			b.Run("engine="+string(e)+"/"+tc.name, func(b *testing.B) {
				opts := dataplane.Options{
					HTTP1Engine: e, Listener: listenOn127(),
					Forward: forward.Options{MaxRequestsPerConnection: math.MaxInt32},
				}
				if tc.on {
					tr, err := tracing.New(tracing.Options{Endpoint: endpoint, Protocol: tracing.ProtocolGRPC, SamplingRatio: tc.ratio, Exporter: tc.exporter})
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
					opts.Forward.Tracer = tr
				}
				proxy := benchPlane(b, opts, backendAddr)
				before := cpuTime(b)
				benchExchanges(b, proxy)
				b.ReportMetric(float64(cpuTime(b)-before)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}
