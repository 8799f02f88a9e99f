package stream

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Tests that the snapshots in flight of one identity are held to its byte budget: with one of
// its proxies sitting on an unread snapshot, a push of another version beyond the budget closes
// that stream with RESOURCE_EXHAUSTED, while another identity is served.
func TestSnapshotsInFlightOfAnIdentityAreBudgeted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.MaxInFlightBytesPerIdentity = 3 << 20 })
	reader := e.subscribe(t, webID, "reader", webScope)
	reader.ack(reader.mustRecv())
	e.stuckProxy(t) // holds 2 MiB of the web scope's second version, unread
	reader.ack(reader.mustRecv())
	e.set(t, webScope, map[string]string{"listener": bigListener + "third"})
	if _, err := reader.recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a push beyond the identity's budget: %v, want ResourceExhausted", err)
	}
	if got := testutil.ToFloat64(e.srv.metrics.denied.WithLabelValues(string(ReasonTooManyBytesInFlight))); got != 1 {
		t.Errorf("closed{TooManyBytesInFlight} = %v, want 1", got)
	}
	e.set(t, apiScope, map[string]string{"listener": bigListener})
	api := e.subscribe(t, apiID, "api", apiScope)
	api.mustRecv()
}

// Tests that streams of one identity sending the same version count its bytes once.
func TestOneVersionInFlightCountsOnceAgainstTheBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.MaxInFlightBytesPerIdentity = 3 << 20 })
	e.set(t, webScope, map[string]string{"listener": bigListener})
	for _, node := range []string{"a", "b", "c"} {
		e.subscribe(t, webID, node, webScope).mustRecv()
	}
}
