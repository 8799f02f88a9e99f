package cluster

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/test/e2e"
)

// The traced Gateway of the tracing scenario, with parameters of its own.
const (
	gatewayTraced = "web-traced"
	paramsTraced  = "traced"
	hostTraced    = "traced.example.com"
)

// spanCollector is an OTLP/gRPC trace collector that keeps what it receives.
type spanCollector struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []collected
}

// collected is a span with the resource attributes it came with.
type collected struct {
	span     *tracev1.Span
	resource map[string]string
}

func (c *spanCollector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		res := map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			res[kv.GetKey()] = kv.GetValue().GetStringValue()
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, collected{span: s, resource: res})
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (c *spanCollector) find(traceID string) (collected, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.spans {
		if hex.EncodeToString(s.span.GetTraceId()) == traceID {
			return s, true
		}
	}
	return collected{}, false
}

// nodeAddress returns the InternalIP of the cluster's node: the bridge address that pods reach
// and this test process listens on.
func (s *suite) nodeAddress(ctx context.Context) (string, error) {
	var nodes corev1.NodeList
	if err := s.client.List(ctx, &nodes); err != nil {
		return "", err
	}
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				return a.Address, nil
			}
		}
	}
	return "", fmt.Errorf("no node has an InternalIP among %d nodes", len(nodes.Items))
}

var traceparentLine = regexp.MustCompile(`(?m)^traceparent: (00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2})$`)

// requestTraced runs a collector in this process on the node's address, gives a dedicated
// Gateway parameters that trace to it, and sends a request carrying a client's traceparent
// through the Gateway's proxy pod: the echo backend must see the client's trace with the proxy's
// span as parent, and the collector must receive that span, the client's span's child, from the
// proxy pod, with the route on it.
func (s *suite) requestTraced(t *testing.T) {
	ctx := t.Context()
	ip, err := s.nodeAddress(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("collector on the node address: %v", err)
	}
	coll := &spanCollector{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, coll)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	endpoint := "http://" + ln.Addr().String()
	// The Gateway's own parameters choose the endpoint: the operator must allow it first.
	if err := s.allowTracingEndpoint(ctx, endpoint); err != nil {
		t.Fatal(err)
	}

	params := &v1alpha1.CoxswainGatewayParameters{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: paramsTraced},
		Spec: v1alpha1.CoxswainGatewayParametersSpec{
			Replicas: ptr.To[int32](1),
			Tracing:  &v1alpha1.Tracing{Endpoint: endpoint},
		},
	}
	gw := e2e.Gateway(namespace, gatewayTraced, className, listenerPort)
	gw.Spec.Infrastructure = &gwapiv1.GatewayInfrastructure{ParametersRef: &gwapiv1.LocalParametersReference{
		Group: gwapiv1.Group(v1alpha1.GroupVersion.Group), Kind: "CoxswainGatewayParameters", Name: paramsTraced,
	}}
	for _, obj := range []client.Object{params, gw, route(gatewayTraced, hostTraced)} {
		if err := s.ensure(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	// The parameters may exist from an earlier run with another endpoint: this run's collector
	// is the one the proxy must use.
	if err := s.setTracingEndpoint(ctx, endpoint); err != nil {
		t.Fatal(err)
	}

	const clientTrace, clientSpan = "5b8aa5a2d2c872e8321cf37308d69df2", "051581bf3cb55c13"
	var body string
	err = e2e.Poll(ctx, 3*time.Minute, 500*time.Millisecond, func(ctx context.Context) error {
		addr, err := s.gatewayAddress(ctx, gatewayTraced)
		if err != nil {
			return err
		}
		pod, err := s.proxyPod(ctx, gatewayTraced)
		if err != nil {
			return err
		}
		if !hasArg(pod, "--tracing-endpoint="+endpoint) {
			return fmt.Errorf("proxy pod %s does not trace to %s yet", pod.Name, endpoint)
		}
		body, err = getWithTraceparent(ctx, net.JoinHostPort(addr, fmt.Sprint(listenerPort)), hostTraced, "00-"+clientTrace+"-"+clientSpan+"-01")
		if err != nil {
			return err
		}
		return checkEcho(hostTraced, "/traced")(e2e.Response{Code: http.StatusOK, Body: []byte(body)})
	})
	if err != nil {
		t.Fatalf("gateway %s never served %s through a traced proxy: %v", gatewayTraced, hostTraced, err)
	}
	m := traceparentLine.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("the backend got no traceparent: %q", body)
	}
	parts := strings.Split(m[1], "-")
	if parts[1] != clientTrace || parts[2] == clientSpan {
		t.Fatalf("the backend got traceparent %s: want the client's trace %s under the proxy's span", m[1], clientTrace)
	}
	proxySpan := parts[2]
	var got collected
	if err := e2e.Poll(ctx, 30*time.Second, 250*time.Millisecond, func(context.Context) error {
		var ok bool
		if got, ok = coll.find(clientTrace); !ok {
			return fmt.Errorf("no span of trace %s at the collector yet", clientTrace)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sp := got.span
	if hex.EncodeToString(sp.GetSpanId()) != proxySpan || hex.EncodeToString(sp.GetParentSpanId()) != clientSpan {
		t.Errorf("collector got span %x under %x; want %s (the backend's parent) under the client's %s",
			sp.GetSpanId(), sp.GetParentSpanId(), proxySpan, clientSpan)
	}
	wantName := "GET " + namespace + "/" + gatewayTraced + "/0/0"
	if sp.GetName() != wantName {
		t.Errorf("span name %q, want %q", sp.GetName(), wantName)
	}
	pod, err := s.proxyPod(ctx, gatewayTraced)
	if err != nil {
		t.Fatal(err)
	}
	if got.resource["k8s.pod.name"] != pod.Name || got.resource["coxswain.proxy.gateway"] != namespace+"/"+gatewayTraced {
		t.Errorf("span resource %v: want pod %s of gateway %s/%s", got.resource, pod.Name, namespace, gatewayTraced)
	}
	t.Logf("Trace %s: client span %s, proxy span %s (pod %s), backend saw the proxy's span as parent", clientTrace, clientSpan, proxySpan, pod.Name)
}

// setTracingEndpoint points the traced parameters at endpoint.
func (s *suite) setTracingEndpoint(ctx context.Context, endpoint string) error {
	var p v1alpha1.CoxswainGatewayParameters
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: paramsTraced}, &p); err != nil {
		return err
	}
	if p.Spec.Tracing != nil && p.Spec.Tracing.Endpoint == endpoint {
		return nil
	}
	p.Spec.Tracing = &v1alpha1.Tracing{Endpoint: endpoint}
	return s.client.Update(ctx, &p)
}

func hasArg(p *corev1.Pod, arg string) bool {
	for _, c := range p.Spec.Containers {
		for _, a := range c.Args {
			if a == arg {
				return true
			}
		}
	}
	return false
}

// getWithTraceparent sends GET /traced for host to addr with a traceparent and returns the
// body of a 200.
func getWithTraceparent(ctx context.Context, addr, host, traceparent string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+"/traced", http.NoBody)
	if err != nil {
		return "", err
	}
	req.Header.Set("Traceparent", traceparent)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, network, addr)
		},
		DisableKeepAlives: true,
	}}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d: %q", resp.StatusCode, b)
	}
	return string(b), nil
}
