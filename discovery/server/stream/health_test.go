package stream

import (
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"coxswain.dev/coxswain/discovery/server/servertest"
)

// Tests that the stream listener answers health checks over mTLS, refuses the health Watch
// stream, and reports NOT_SERVING after Shutdown.
func TestStreamListenerHealth(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	conn := servertest.Dial(t, e.addr, e.pki.StreamClientTLS(e.pki.SVID(t, sharedID)))
	h := healthpb.NewHealthClient(conn)
	for _, svc := range []string{"", "coxswain.discovery.v1.Discovery"} {
		resp, err := h.Check(t.Context(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Check(%q) = %v, %v; want SERVING", svc, resp, err)
		}
	}
	w, err := h.Watch(t.Context(), &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("Watch: %v, want PermissionDenied", err)
	}
	e.srv.Shutdown()
	if resp, err := h.Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("Check after Shutdown = %v, %v; want NOT_SERVING", resp, err)
	}
}
