package bootstrap

import (
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Tests that the bootstrap listener answers health checks.
func TestBootstrapListenerHealth(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, svc := range []string{"", "coxswain.discovery.v1.Discovery"} {
		resp, err := healthpb.NewHealthClient(e.conn).Check(t.Context(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Check(%q) = %v, %v; want SERVING", svc, resp, err)
		}
	}
}
