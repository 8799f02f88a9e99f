package bootstrap

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Tests that the bootstrap listener serves Bootstrap and nothing else.
func TestBootstrapListenerRefusesOtherMethods(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cases := []struct {
		name string
		call func() error
	}{
		{name: "the Stream method is refused", call: func() error {
			stream, err := e.client.Stream(t.Context())
			if err != nil {
				return err
			}
			_, err = stream.Recv()
			return err
		}},
		{name: "a unary method of an unknown service is refused", call: func() error {
			return e.conn.Invoke(t.Context(), "/grpc.reflection.v1.ServerReflection/Unknown", &emptypb.Empty{}, &emptypb.Empty{})
		}},
		{name: "a streaming method of an unknown service is refused", call: func() error {
			desc := &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}
			stream, err := e.conn.NewStream(t.Context(), desc, "/coxswain.discovery.v1.Discovery/Debug")
			if err != nil {
				return err
			}
			return stream.RecvMsg(&emptypb.Empty{})
		}},
	}
	for i, tc := range cases {
		if err := tc.call(); status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s: %v, want PermissionDenied", tc.name, err)
		}
		want := float64(i + 1)
		if got := testutil.ToFloat64(e.svc.metrics.total.WithLabelValues(resultRejected, string(ReasonMethodNotAllowed))); got != want {
			t.Errorf("%s: rejected{MethodNotAllowed} = %v, want %v", tc.name, got, want)
		}
	}
	if _, err := e.svc.NewGRPCServer(nil); err == nil {
		t.Error("a server without TLS was built")
	}
}
