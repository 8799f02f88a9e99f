package dataplane_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// grpcMaxMessage bounds the messages of the gRPC tests on both sides, above the 4 MiB one sent.
const grpcMaxMessage = 16 << 20

// grpcServer is a real grpc-go TestService backend. Its unary call echoes the x-echo request
// metadata as a response header and sets a custom trailer, and answers with the status the
// request asks for, with a detail; its server stream sends the first message and waits for
// release before the others; its empty call blocks until its context ends and reports why.
type grpcServer struct {
	testpb.UnimplementedTestServiceServer
	release  chan struct{}
	canceled chan error
}

func (s *grpcServer) UnaryCall(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-echo", strings.Join(md.Get("x-echo"), ",")))
	_ = grpc.SetTrailer(ctx, metadata.Pairs("x-custom-trailer", "trailer-value"))
	if st := in.GetResponseStatus(); st != nil {
		s, err := status.New(codes.Code(st.GetCode()), st.GetMessage()).WithDetails(&testpb.Payload{Body: []byte("detail")})
		if err != nil {
			return nil, err
		}
		return nil, s.Err()
	}
	return &testpb.SimpleResponse{Payload: &testpb.Payload{Body: make([]byte, in.GetResponseSize())}, Username: string(rune('0' + len(in.GetPayload().GetBody())%10))}, nil
}

func (s *grpcServer) StreamingOutputCall(in *testpb.StreamingOutputCallRequest, stream grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	for i, p := range in.GetResponseParameters() {
		if i == 1 && s.release != nil {
			select {
			case <-s.release:
			case <-stream.Context().Done():
				return stream.Context().Err()
			}
		}
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: make([]byte, p.GetSize())}}); err != nil {
			return err
		}
	}
	return nil
}

func (s *grpcServer) StreamingInputCall(stream grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
	var sum int32
	for {
		in, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: sum})
		}
		if err != nil {
			return err
		}
		sum += int32(len(in.GetPayload().GetBody())) //nolint:gosec // test payloads are small
	}
}

func (s *grpcServer) FullDuplexCall(stream grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
	for {
		in, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		size := int32(len(in.GetPayload().GetBody())) //nolint:gosec // test payloads are small
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: make([]byte, size+1)}}); err != nil {
			return err
		}
	}
}

func (s *grpcServer) EmptyCall(ctx context.Context, _ *testpb.Empty) (*testpb.Empty, error) {
	<-ctx.Done()
	select {
	case s.canceled <- ctx.Err():
	default: // nobody waits for it
	}
	return nil, ctx.Err()
}

// startGRPCServer serves s on 127.0.0.1, over h2c, or over TLS with cert when it is not nil.
func startGRPCServer(t *testing.T, s *grpcServer, cert *tls.Certificate) string {
	t.Helper()
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(grpcMaxMessage), grpc.MaxSendMsgSize(grpcMaxMessage)}
	if cert != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12})))
	}
	srv := grpc.NewServer(opts...)
	testpb.RegisterTestServiceServer(srv, s)
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// grpcClient dials the proxy at addr for authority, h2c with prior knowledge, or TLS with ALPN h2.
func grpcClient(t *testing.T, addr, authority string, useTLS bool) testpb.TestServiceClient {
	t.Helper()
	creds := insecure.NewCredentials()
	if useTLS {
		creds = credentials.NewTLS(&tls.Config{InsecureSkipVerify: true, ServerName: authority}) //nolint:gosec // the proxy's test certificate
	}
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds), grpc.WithAuthority(authority),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(grpcMaxMessage), grpc.MaxCallSendMsgSize(grpcMaxMessage)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return testpb.NewTestServiceClient(cc)
}

// grpcRoute is a route for the TestService's methods to cluster, with a response header set.
func grpcRoute(name, cluster string) *discoveryv1.Route {
	r := snaptest.Route(name, "", snaptest.Prefix("/grpc.testing.TestService/"), cluster)
	r.Filters = []*discoveryv1.Filter{filter(&discoveryv1.Filter_ResponseHeaders{ResponseHeaders: &discoveryv1.HeaderModifier{
		Set: []*discoveryv1.Header{setHeader("X-Route", "grpc")},
	}})}
	return r
}

// grpcProxy starts a data plane with a plain port 80 and a TLS port 443 whose routes send the
// TestService to h2c and TLS gRPC backends (by host) and an empty service to a cluster
// without endpoints.
func grpcProxy(t *testing.T, s *grpcServer) *dataplane.DataPlane {
	t.Helper()
	ca := newTestCA(t, "grpc-ca")
	backendCert := ca.issue(t, leaf{dns: []string{"grpc.example.com"}})
	h2c := startGRPCServer(t, s, nil)
	overTLS := startGRPCServer(t, s, &backendCert)
	h2cCluster := snaptest.Cluster(t, "ns/h2c:9000", h2c)
	h2cCluster.UpstreamProtocol = discoveryv1.UpstreamProtocol_UPSTREAM_PROTOCOL_H2C
	tlsCl := tlsCluster(t, "ns/tls:9443", overTLS, &discoveryv1.BackendTLS{ServerName: "grpc.example.com", CaCertificatesPem: ca.pem})
	tlsCl.UpstreamProtocol = discoveryv1.UpstreamProtocol_UPSTREAM_PROTOCOL_H2
	empty := snaptest.Cluster(t, "ns/empty:9000")
	empty.UpstreamProtocol = discoveryv1.UpstreamProtocol_UPSTREAM_PROTOCOL_H2C
	vhosts := func() []*discoveryv1.VirtualHost {
		slow := grpcRoute("ns/slow/0/0", "ns/h2c:9000")
		slow.Timeouts = &discoveryv1.Timeouts{Request: ms(200)}
		invalid := grpcRoute("ns/invalid/0/0", "")
		invalid.Backends = []*discoveryv1.WeightedBackend{{ErrorStatus: 500, Weight: 1}}
		return []*discoveryv1.VirtualHost{
			snaptest.VHost("slow", "slow.example.com", slow),
			snaptest.VHost("invalid", "invalid.example.com", invalid),
			snaptest.VHost("h2c", "h2c.example.com", grpcRoute("ns/h2c/0/0", "ns/h2c:9000")),
			snaptest.VHost("tls", "tls.example.com", grpcRoute("ns/tls/0/0", "ns/tls:9443")),
			snaptest.VHost("empty", "empty.example.com", grpcRoute("ns/empty/0/0", "ns/empty:9000")),
		}
	}
	secure := vhosts()
	for _, vh := range secure {
		vh.Certificates = []string{"ns/front"}
	}
	front, _ := snaptest.Certificate(t, "ns/front", "*.example.com")
	d := start(t, dataplane.Options{})
	apply(t, d,
		snaptest.HTTP("ns/gw", 80, vhosts()...),
		snaptest.Listener("ns/gw", 443, discoveryv1.Protocol_PROTOCOL_HTTPS, secure...),
		front, h2cCluster, tlsCl, empty,
	)
	return d
}

// Tests that real gRPC calls cross the proxy intact, in front over h2c and over TLS, behind to
// an h2c and a TLS backend: unary calls with request metadata, response headers (the route's
// ResponseHeaderModifier too) and trailers, a non-OK status with its message and details, the
// three kinds of stream with many messages each way, 4 MiB messages both ways, and a client's
// cancellation reaching the backend.
func TestGRPCThroughProxy(t *testing.T) {
	t.Parallel()
	s := &grpcServer{canceled: make(chan error, 1)}
	d := grpcProxy(t, s)
	for _, front := range []struct {
		name string
		port uint32
		tls  bool
	}{{"h2c", 80, false}, {"tls", 443, true}} {
		for _, back := range []string{"h2c", "tls"} {
			t.Run(front.name+" to "+back, func(t *testing.T) {
				c := grpcClient(t, addr(t, d, front.port), back+".example.com", front.tls)
				testGRPCCalls(t, c, s)
			})
		}
	}
}

func testGRPCCalls(t *testing.T, c testpb.TestServiceClient, s *grpcServer) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-echo", "hello")

	var header, trailer metadata.MD
	resp, err := c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 3}, grpc.Header(&header), grpc.Trailer(&trailer))
	if err != nil {
		t.Fatalf("unary: %v", err)
	}
	if len(resp.GetPayload().GetBody()) != 3 {
		t.Errorf("unary: payload of %d bytes, want 3", len(resp.GetPayload().GetBody()))
	}
	if got := header.Get("x-echo"); len(got) != 1 || got[0] != "hello" {
		t.Errorf("unary: header x-echo %q, want the request's metadata [hello]", got)
	}
	if got := header.Get("x-route"); len(got) != 1 || got[0] != "grpc" {
		t.Errorf("unary: header x-route %q, want the route's [grpc]", got)
	}
	if got := trailer.Get("x-custom-trailer"); len(got) != 1 || got[0] != "trailer-value" {
		t.Errorf("unary: trailer x-custom-trailer %q, want [trailer-value]", got)
	}

	trailer = nil
	_, err = c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(codes.FailedPrecondition), Message: "not now: 100% ünïcode"}}, grpc.Trailer(&trailer))
	st := status.Convert(err)
	if st.Code() != codes.FailedPrecondition || st.Message() != "not now: 100% ünïcode" {
		t.Errorf("unary error: got %v %q, want FailedPrecondition with the server's message", st.Code(), st.Message())
	}
	if ds := st.Details(); len(ds) != 1 || string(ds[0].(*testpb.Payload).GetBody()) != "detail" {
		t.Errorf("unary error: details %v, want the server's one payload", ds)
	}
	if got := trailer.Get("x-custom-trailer"); len(got) != 1 || got[0] != "trailer-value" {
		t.Errorf("unary error: trailer x-custom-trailer %q, want [trailer-value]", got)
	}

	big := make([]byte, 4<<20)
	resp, err = c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 4 << 20, Payload: &testpb.Payload{Body: big}})
	if err != nil || len(resp.GetPayload().GetBody()) != 4<<20 || resp.GetUsername() != string(rune('0'+(4<<20)%10)) {
		t.Errorf("4 MiB each way: %v", err)
	}

	const n = 200
	params := make([]*testpb.ResponseParameters, n)
	for i := range params {
		params[i] = &testpb.ResponseParameters{Size: int32(i)} //nolint:gosec // i < n
	}
	out, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{ResponseParameters: params})
	if err != nil {
		t.Fatalf("server stream: %v", err)
	}
	for i := 0; ; i++ {
		m, err := out.Recv()
		if errors.Is(err, io.EOF) {
			if i != n {
				t.Errorf("server stream: %d messages, want %d", i, n)
			}
			break
		}
		if err != nil || len(m.GetPayload().GetBody()) != i {
			t.Fatalf("server stream: message %d: %v", i, err)
		}
	}

	in, err := c.StreamingInputCall(ctx)
	if err != nil {
		t.Fatalf("client stream: %v", err)
	}
	want := int32(0)
	for i := range n {
		want += int32(i) //nolint:gosec // i < n
		if err := in.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: make([]byte, i)}}); err != nil {
			t.Fatalf("client stream: send %d: %v", i, err)
		}
	}
	sum, err := in.CloseAndRecv()
	if err != nil || sum.GetAggregatedPayloadSize() != want {
		t.Errorf("client stream: got %d, %v; want %d", sum.GetAggregatedPayloadSize(), err, want)
	}

	// Ping-pong: each message waits for the answer to the one before, so nothing along the way
	// may hold either direction back.
	bidi, err := c.FullDuplexCall(ctx)
	if err != nil {
		t.Fatalf("bidi: %v", err)
	}
	for i := range n {
		if err := bidi.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: make([]byte, i)}}); err != nil {
			t.Fatalf("bidi: send %d: %v", i, err)
		}
		m, err := bidi.Recv()
		if err != nil || len(m.GetPayload().GetBody()) != i+1 {
			t.Fatalf("bidi: answer %d: %v", i, err)
		}
	}
	if err := bidi.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := bidi.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("bidi: after close got %v, want EOF", err)
	}

	cctx, ccancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer ccancel()
	_, err = c.EmptyCall(cctx, &testpb.Empty{})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("deadline: got %v, want DeadlineExceeded", err)
	}
	select {
	case err := <-s.canceled:
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("deadline: backend's context ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("deadline: the backend's call never saw its context end")
	}
}

// Tests that a server stream is not held back: the client receives the first message while the
// backend waits to send the second, over h2c on both sides and over TLS in front.
func TestGRPCStreamNotBuffered(t *testing.T) {
	t.Parallel()
	s := &grpcServer{release: make(chan struct{}), canceled: make(chan error, 1)}
	d := grpcProxy(t, s)
	for _, front := range []struct {
		port uint32
		tls  bool
	}{{80, false}, {443, true}} {
		c := grpcClient(t, addr(t, d, front.port), "h2c.example.com", front.tls)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{Size: 10}, {Size: 20}}})
		if err != nil {
			t.Fatal(err)
		}
		first := make(chan error, 1)
		go func() {
			m, err := out.Recv()
			if err == nil && len(m.GetPayload().GetBody()) != 10 {
				err = errors.New("first message of the wrong size")
			}
			first <- err
		}()
		select {
		case err := <-first:
			if err != nil {
				t.Fatalf("port %d: first message: %v", front.port, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("port %d: the first message did not arrive before the second was sent", front.port)
		}
		s.release <- struct{}{}
		if m, err := out.Recv(); err != nil || len(m.GetPayload().GetBody()) != 20 {
			t.Fatalf("port %d: second message: %v", front.port, err)
		}
		if _, err := out.Recv(); !errors.Is(err, io.EOF) {
			t.Fatalf("port %d: end: %v", front.port, err)
		}
		cancel()
	}
}

// Tests that the proxy's own answers to gRPC calls are gRPC statuses the real client reads: a
// method no route matches is Unimplemented, a cluster without endpoints and an invalid backend
// Unavailable and the route's timeout DeadlineExceeded, over h2c and TLS; an HTTP/1.1 request for the same unmatched path still gets a plain 404.
func TestGRPCLocalReplies(t *testing.T) {
	t.Parallel()
	d := grpcProxy(t, &grpcServer{canceled: make(chan error, 1)})
	for _, front := range []struct {
		port uint32
		tls  bool
	}{{80, false}, {443, true}} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		// The vhost routes only /grpc.testing.TestService/: another service's method is unmatched.
		cc, err := grpc.NewClient("passthrough:///"+addr(t, d, front.port), grpc.WithAuthority("h2c.example.com"), grpc.WithTransportCredentials(func() credentials.TransportCredentials {
			if front.tls {
				return credentials.NewTLS(&tls.Config{InsecureSkipVerify: true, ServerName: "h2c.example.com"}) //nolint:gosec // the proxy's test certificate
			}
			return insecure.NewCredentials()
		}()))
		if err != nil {
			t.Fatal(err)
		}
		other := testpb.NewUnimplementedServiceClient(cc)
		_, err = other.UnimplementedCall(ctx, &testpb.Empty{})
		if st := status.Convert(err); st.Code() != codes.Unimplemented || st.Message() != "proxy: 404 Not Found" {
			t.Errorf("port %d: unmatched method: got %v %q, want Unimplemented from the proxy's 404", front.port, st.Code(), st.Message())
		}
		_ = cc.Close()
		c := grpcClient(t, addr(t, d, front.port), "empty.example.com", front.tls)
		_, err = c.UnaryCall(ctx, &testpb.SimpleRequest{})
		if st := status.Convert(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "no_endpoints") {
			t.Errorf("port %d: no endpoints: got %v %q, want Unavailable", front.port, st.Code(), st.Message())
		}
		for _, tc := range []struct {
			host    string
			code    codes.Code
			message string
		}{
			{"slow.example.com", codes.DeadlineExceeded, "504"},
			{"invalid.example.com", codes.Unavailable, "500"},
		} {
			c := grpcClient(t, addr(t, d, front.port), tc.host, front.tls)
			_, err = c.EmptyCall(ctx, &testpb.Empty{})
			if st := status.Convert(err); st.Code() != tc.code || !strings.Contains(st.Message(), tc.message) {
				t.Errorf("port %d: %s: got %v %q, want %v from the proxy's %s", front.port, tc.host, st.Code(), st.Message(), tc.code, tc.message)
			}
		}
		cancel()
	}
	// On the wire: one HEADERS frame that ends the stream, 200 with grpc-status, no body.
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	h2c := client(addr(t, d, 80))
	h2c.Transport.(*http.Transport).Protocols = &protocols
	raw := do(t, h2c, http.MethodPost, "http://h2c.example.com/grpc.testing.UnimplementedService/UnimplementedCall", "Content-Type: application/grpc", "Te: trailers")
	if raw.status != http.StatusOK || raw.header.Get("Content-Type") != "application/grpc" || raw.header.Get("Grpc-Status") != "12" ||
		raw.header.Get("Grpc-Message") != "proxy: 404 Not Found" || raw.body != "" {
		t.Errorf("HTTP/2 unmatched call: got %d %v %q, want a trailers-only 200 with grpc-status 12", raw.status, raw.header, raw.body)
	}
	resp := do(t, client(addr(t, d, 80)), http.MethodPost, "http://h2c.example.com/grpc.testing.UnimplementedService/UnimplementedCall", "Content-Type: application/grpc")
	if resp.status != http.StatusNotFound || resp.header.Get("Grpc-Status") != "" {
		t.Errorf("HTTP/1.1: got %d grpc-status %q, want a plain 404", resp.status, resp.header.Get("Grpc-Status"))
	}
}

// Tests that a gRPC call reaches an h2c backend with TE: trailers, which gRPC servers may
// require, and that a backend's trailers reach the client: grpc-go hides TE from its handlers,
// so the backend here is net/http's HTTP/2 server answering one empty message and trailers.
func TestGRPCTrailersTE(t *testing.T) {
	t.Parallel()
	te := make(chan []string, 1)
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &protocols, ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		te <- r.Header.Values("Te")
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status, Grpc-Message, X-Custom-Trailer")
		_, _ = w.Write([]byte{0, 0, 0, 0, 0})
		w.Header().Set("Grpc-Status", "0")
		w.Header().Set("Grpc-Message", "")
		w.Header().Set("X-Custom-Trailer", "from-net-http")
	})}
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	cl := snaptest.Cluster(t, "ns/raw:9000", ln.Addr().String())
	cl.UpstreamProtocol = discoveryv1.UpstreamProtocol_UPSTREAM_PROTOCOL_H2C
	d := start(t, dataplane.Options{})
	apply(t, d, snaptest.HTTP("ns/gw", 80, snaptest.VHost("raw", "", grpcRoute("ns/raw/0/0", "ns/raw:9000"))), cl)
	c := grpcClient(t, addr(t, d, 80), "raw.example.com", false)
	var trailer metadata.MD
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Trailer(&trailer)); err != nil {
		t.Fatalf("unary: %v", err)
	}
	if got := <-te; len(got) != 1 || got[0] != "trailers" {
		t.Errorf("backend saw TE %q, want [trailers]", got)
	}
	if got := trailer.Get("x-custom-trailer"); len(got) != 1 || got[0] != "from-net-http" {
		t.Errorf("trailer x-custom-trailer %q, want [from-net-http]", got)
	}
}
