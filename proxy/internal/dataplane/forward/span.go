package forward

import (
	"net/http"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"coxswain.dev/coxswain/discovery/tracing"
)

// startSpan starts the request's server span, as the caller's child when its traceparent is
// valid, with what is known before routing: OpenTelemetry's HTTP server attributes and the
// request ID, set only on a span that is recorded (the sampler looks at none).
func (x *exchange) startSpan() {
	r := x.r
	x.span = x.h.opts.Tracer.Start(r.Header, r.Method, x.start)
	if !x.span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{
		attribute.String("http.request.method", r.Method),
		attribute.String("url.path", r.URL.Path),
		attribute.String("url.scheme", x.listener.Scheme),
		attribute.String("server.address", r.Host),
		attribute.Int("server.port", int(x.listener.Port)),
		attribute.String("network.protocol.version", protocolVersion(r)),
		attribute.String("client.address", clientOf(r)),
	}
	if x.requestID != "" {
		attrs = append(attrs, attribute.String("coxswain.request_id", x.requestID))
	}
	x.span.SetAttributes(attrs...)
}

// endSpan names the span after its route ("GET ns/route/rule/match") and ends it with what the
// request became: its Gateway and route, the backend address and status, the retries, and why
// the proxy chose the status when it did.
func (x *exchange) endSpan(status int) {
	if !x.span.IsRecording() {
		x.span.End()
		return
	}
	attrs := make([]attribute.KeyValue, 0, 8)
	if x.vhost != nil {
		gateway, port := listenerGateway(x.vhost.Listener)
		attrs = append(attrs, attribute.String("coxswain.gateway", gateway), attribute.String("coxswain.listener", x.vhost.Name),
			attribute.String("coxswain.listener.port", port))
	}
	if x.route != nil {
		x.span.SetName(x.r.Method + " " + x.route.Name)
		attrs = append(attrs, attribute.String("coxswain.route", x.route.Name))
	}
	if x.upstream != "" {
		attrs = append(attrs, attribute.String("coxswain.backend.address", x.upstream))
	}
	if x.upstreamStatus != 0 {
		attrs = append(attrs, attribute.Int("coxswain.backend.status_code", x.upstreamStatus))
	}
	if x.retries > 0 {
		attrs = append(attrs, attribute.Int("coxswain.retries", x.retries))
	}
	if x.reason != "" {
		attrs = append(attrs, attribute.String("coxswain.refusal_reason", x.reason))
	}
	tracing.End(x.span, status, attrs...)
}

// retryEvent records on the span that attempt (1 for the first retry) is sent, and what the
// previous attempt got: a status, or an error.
func (x *exchange) retryEvent(attempt int, resp *http.Response, err error) {
	if !x.span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{attribute.Int("coxswain.retry.attempt", attempt)}
	if resp != nil {
		attrs = append(attrs, attribute.Int("coxswain.retry.previous_status_code", resp.StatusCode))
	}
	if err != nil {
		attrs = append(attrs, attribute.String("coxswain.retry.previous_error", err.Error()))
	}
	x.span.AddEvent("retry", trace.WithAttributes(attrs...))
}

// listenerGateway splits a Listener resource's name, "<namespace>/<gateway>/<port>", into the
// Gateway ("<namespace>/<gateway>") and the port.
func listenerGateway(name string) (gateway, port string) {
	i := strings.LastIndexByte(name, '/')
	if i < 0 {
		return name, ""
	}
	return name[:i], name[i+1:]
}

func protocolVersion(r *http.Request) string {
	if r.ProtoMajor == 2 {
		return "2"
	}
	return "1." + strconv.Itoa(r.ProtoMinor)
}
