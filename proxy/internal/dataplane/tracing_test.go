package dataplane_test

import (
	"context"
	"encoding/hex"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/tracing"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/forward"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// collector is an OTLP/gRPC trace collector that keeps the spans it receives.
type collector struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracev1.Span
	// attrs are the resource attributes of the last export.
	attrs map[string]string
}

func (c *collector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		c.attrs = map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			c.attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
		}
		for _, ss := range rs.GetScopeSpans() {
			c.spans = append(c.spans, ss.GetSpans()...)
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// span returns the span of traceID (hex) once one arrived, or nil.
func (c *collector) span(traceID string) *tracev1.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.spans {
		if hex.EncodeToString(s.GetTraceId()) == traceID {
			return s
		}
	}
	return nil
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.spans)
}

// startCollector serves a collector over OTLP/gRPC on 127.0.0.1 and returns it with its URL.
func startCollector(t *testing.T) (*collector, string) {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, c)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return c, "http://" + ln.Addr().String()
}

// tracedPlane starts a data plane tracing to endpoint at ratio, with an HTTP listener on port
// 80 whose route ns/r/0/0 goes to be.
func tracedPlane(t *testing.T, endpoint string, ratio float64, be string) (*tracing.Tracer, string) {
	t.Helper()
	return tracedPlaneWith(t, tracing.Options{Endpoint: endpoint, SamplingRatio: ratio}, be)
}

// tracedPlaneWith is tracedPlane with the tracer's options (over OTLP/gRPC).
func tracedPlaneWith(t *testing.T, opts tracing.Options, be string) (*tracing.Tracer, string) {
	t.Helper()
	opts.Protocol = tracing.ProtocolGRPC
	tr, err := tracing.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	d := start(t, dataplane.Options{Forward: forward.Options{Tracer: tr}})
	apply(t, d, snaptest.HTTP("ns/gw", 80, snaptest.VHost("web", "", snaptest.Route("ns/r/0/0", "", snaptest.Prefix("/"), "ns/app:80"))),
		snaptest.Cluster(t, "ns/app:80", be))
	return tr, addr(t, d, 80)
}

// parseTraceparent splits a version 00 traceparent into its trace ID, parent span ID and flags.
func parseTraceparent(t *testing.T, v string) (traceID, spanID, flags string) {
	t.Helper()
	parts := strings.Split(v, "-")
	if len(parts) != 4 || parts[0] != "00" || len(parts[1]) != 32 || len(parts[2]) != 16 {
		t.Fatalf("traceparent %q is not a version 00 one", v)
	}
	return parts[1], parts[2], parts[3]
}

func attrOf(s *tracev1.Span, key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			if v := kv.GetValue().GetStringValue(); v != "" {
				return v
			}
			if v := kv.GetValue().GetIntValue(); v != 0 {
				return strconv.FormatInt(v, 10)
			}
		}
	}
	return ""
}

// Tests a request traced end to end: the client's trace continues through the proxy (its span
// is the client's span's child, in the client's trace), the backend gets a traceparent naming
// the proxy's span as its parent, and the collector receives that span, named after the route,
// with the route, Gateway, listener, backend, status and request ID, and the proxy's resource.
func TestTracingContinuesTheClientsTrace(t *testing.T) {
	t.Parallel()
	coll, endpoint := startCollector(t)
	app, _ := backend(t, "app")
	_, proxy := tracedPlane(t, endpoint, 1, hostPort(app))

	const clientTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	r := do(t, client(proxy), "GET", "http://web.example/x", "Traceparent: 00-"+clientTrace+"-"+clientSpan+"-01",
		"Tracestate: vendor=opaque", "X-Request-Id: req-1")
	if r.status != 200 {
		t.Fatalf("status %d", r.status)
	}
	got := r.echo.Headers["Traceparent"]
	if len(got) != 1 {
		t.Fatalf("the backend got traceparent %q", got)
	}
	traceID, parent, flags := parseTraceparent(t, got[0])
	if traceID != clientTrace || parent == clientSpan || flags != "01" {
		t.Fatalf("backend traceparent %q: want the client's trace, the proxy's span as parent, sampled", got[0])
	}
	if ts := r.echo.Headers["Tracestate"]; len(ts) != 1 || ts[0] != "vendor=opaque" {
		t.Errorf("the backend got tracestate %q, want the client's", ts)
	}
	var s *tracev1.Span
	eventually(t, "the collector received the span", func() bool { s = coll.span(clientTrace); return s != nil })
	if hex.EncodeToString(s.GetSpanId()) != parent || hex.EncodeToString(s.GetParentSpanId()) != clientSpan {
		t.Errorf("span %x with parent %x; want span %s (the backend's parent) under the client's %s",
			s.GetSpanId(), s.GetParentSpanId(), parent, clientSpan)
	}
	if s.GetKind() != tracev1.Span_SPAN_KIND_SERVER || s.GetName() != "GET ns/r/0/0" {
		t.Errorf("span %q of kind %v", s.GetName(), s.GetKind())
	}
	for key, want := range map[string]string{
		"coxswain.route": "ns/r/0/0", "coxswain.gateway": "ns/gw", "coxswain.listener": "web", "coxswain.listener.port": "80",
		"coxswain.backend.address": hostPort(app), "http.response.status_code": "200", "coxswain.request_id": "req-1",
		"http.request.method": "GET", "url.path": "/x",
	} {
		if got := attrOf(s, key); got != want {
			t.Errorf("span attribute %s = %q, want %q", key, got, want)
		}
	}
	if s.GetStatus().GetCode() == tracev1.Status_STATUS_CODE_ERROR {
		t.Error("a 200 marked as an error")
	}
	if coll.attrs["service.name"] != tracing.ServiceProxy {
		t.Errorf("resource %v", coll.attrs)
	}
}

// Tests the sampling decisions of an edge proxy (the default): a request without a traceparent
// starts a trace that the ratio samples (1: recorded, the backend told so; 0: nothing
// exported, the backend told it is not sampled), and a client's traceparent gives the trace ID
// but not the decision: its sampled flag records nothing at ratio 0 (any client could fill the
// export queue), nor does a trace ID chosen to fall under a tiny ratio's threshold (the
// decision is not the trace ID's hash). A 5xx marks the span an error.
func TestTracingSampling(t *testing.T) {
	t.Parallel()
	coll, endpoint := startCollector(t)
	app, _ := backend(t, "app")
	tr, never := tracedPlane(t, endpoint, 0, hostPort(app))

	r := do(t, client(never), "GET", "http://web.example/")
	got := r.echo.Headers["Traceparent"]
	if len(got) != 1 {
		t.Fatalf("the backend got traceparent %q, want one starting a trace", got)
	}
	if _, _, flags := parseTraceparent(t, got[0]); flags != "00" {
		t.Errorf("ratio 0 sent flags %s, want 00 (not sampled)", flags)
	}
	const sampled = "0af7651916cd43dd8448eb211c80319c"
	for range 20 {
		r = do(t, client(never), "GET", "http://web.example/", "Traceparent: 00-"+sampled+"-b7ad6b7169203331-01")
		if r.status != 200 {
			t.Fatalf("status %d", r.status)
		}
	}
	got = r.echo.Headers["Traceparent"]
	if len(got) != 1 {
		t.Fatalf("the backend got traceparent %q", got)
	}
	if traceID, _, flags := parseTraceparent(t, got[0]); traceID != sampled || flags != "00" {
		t.Errorf("the backend got %q; want the client's trace ID, not sampled", got[0])
	}
	// Shutdown exports what is queued: nothing may be.
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := coll.count(); n != 0 {
		t.Errorf("%d spans exported at ratio 0 for clients' sampled traceparents, want none", n)
	}

	// A trace ID whose low 64 bits (what a ratio sampler over trace IDs compares) are 1 falls
	// under the threshold of any ratio above zero: a client choosing it must not be recorded
	// at a ratio of one in a billion.
	before := coll.count()
	tr, tiny := tracedPlane(t, endpoint, 1e-9, hostPort(app))
	const chosen = "ffffffffffffffff0000000000000001"
	for range 20 {
		if r = do(t, client(tiny), "GET", "http://web.example/", "Traceparent: 00-"+chosen+"-b7ad6b7169203331-01"); r.status != 200 {
			t.Fatalf("status %d", r.status)
		}
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := coll.count() - before; n != 0 {
		t.Errorf("%d spans exported at ratio 1e-9 for a trace ID the client chose, want none", n)
	}

	// A backend that fails: the span is an error.
	down := snaptest.Cluster(t, "ns/app:80", "127.0.0.1:1")
	tr, err := tracing.New(tracing.Options{Endpoint: endpoint, Protocol: tracing.ProtocolGRPC, SamplingRatio: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	d := start(t, dataplane.Options{Forward: forward.Options{Tracer: tr}})
	apply(t, d, snaptest.Listener("ns/gw", 80, discoveryv1.Protocol_PROTOCOL_HTTP,
		snaptest.VHost("web", "", snaptest.Route("ns/r/0/0", "", snaptest.Prefix("/"), "ns/app:80"))), down)
	const failing = "11111111111111111111111111111111"
	r = do(t, client(addr(t, d, 80)), "GET", "http://web.example/", "Traceparent: 00-"+failing+"-2222222222222222-01")
	if r.status < 500 {
		t.Fatalf("status %d from an unreachable backend", r.status)
	}
	var s *tracev1.Span
	eventually(t, "the failed request's span exported", func() bool { s = coll.span(failing); return s != nil })
	if s.GetStatus().GetCode() != tracev1.Status_STATUS_CODE_ERROR || attrOf(s, "coxswain.refusal_reason") == "" {
		t.Errorf("span of a %d: status %v, reason %q", r.status, s.GetStatus().GetCode(), attrOf(s, "coxswain.refusal_reason"))
	}
}

// Tests --tracing-trust-parent-sampling, for a proxy behind a trusted edge: a caller's
// decision is followed whatever the ratio, sampled at ratio 0 and not sampled at ratio 1.
func TestTracingTrustParentSampling(t *testing.T) {
	t.Parallel()
	coll, endpoint := startCollector(t)
	app, _ := backend(t, "app")
	_, never := tracedPlaneWith(t, tracing.Options{Endpoint: endpoint, SamplingRatio: 0, TrustParentSampling: true}, hostPort(app))
	const sampled = "0af7651916cd43dd8448eb211c80319c"
	if r := do(t, client(never), "GET", "http://web.example/", "Traceparent: 00-"+sampled+"-b7ad6b7169203331-01"); r.status != 200 {
		t.Fatalf("status %d", r.status)
	}
	eventually(t, "the caller's sampled trace exported at ratio 0", func() bool { return coll.span(sampled) != nil })

	tr, always := tracedPlaneWith(t, tracing.Options{Endpoint: endpoint, SamplingRatio: 1, TrustParentSampling: true}, hostPort(app))
	const unsampled = "1af7651916cd43dd8448eb211c80319c"
	r := do(t, client(always), "GET", "http://web.example/", "Traceparent: 00-"+unsampled+"-b7ad6b7169203331-00")
	if got := r.echo.Headers["Traceparent"]; len(got) != 1 || !strings.HasSuffix(got[0], "-00") {
		t.Errorf("the backend got %q; want the caller's decision, not sampled", got)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if coll.span(unsampled) != nil {
		t.Error("the caller's unsampled trace exported at ratio 1")
	}
}

// Tests that without a tracer the client's trace context reaches the backend untouched.
func TestTracingOffPassesTraceContextThrough(t *testing.T) {
	t.Parallel()
	app, _ := backend(t, "app")
	d := start(t, dataplane.Options{})
	apply(t, d, snaptest.HTTP("ns/gw", 80, snaptest.VHost("web", "", snaptest.Route("ns/r/0/0", "", snaptest.Prefix("/"), "ns/app:80"))),
		snaptest.Cluster(t, "ns/app:80", hostPort(app)))
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	r := do(t, client(addr(t, d, 80)), "GET", "http://web.example/", "Traceparent: "+tp, "Tracestate: a=b")
	if got := r.echo.Headers["Traceparent"]; len(got) != 1 || got[0] != tp {
		t.Errorf("the backend got traceparent %q, want the client's %q", got, tp)
	}
	if got := r.echo.Headers["Tracestate"]; len(got) != 1 || got[0] != "a=b" {
		t.Errorf("the backend got tracestate %q", got)
	}
}
