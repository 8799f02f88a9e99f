package bootstrap

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"coxswain.dev/coxswain/discovery/server/internal/quiet"
)

// Tests that a flood of one refusal is counted in full but logged and reported only a few
// times, and that it does not hide a refusal of another reason or principal.
func TestRefusalFloodIsReportedSparingly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const flood = 50
	for range flood {
		if _, err := e.client.Bootstrap(t.Context(), withToken(t, "garbage")); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("garbage: %v", err)
		}
	}
	if got := testutil.ToFloat64(e.svc.metrics.total.WithLabelValues(resultRejected, string(ReasonTokenRejected))); got != flood {
		t.Errorf("rejected{TokenRejected} = %v, want %d", got, flood)
	}
	if got := len(e.reporter.all()); got != quiet.DefaultBurst {
		t.Errorf("%d refusals reported, want %d", got, quiet.DefaultBurst)
	}
	if got := testutil.ToFloat64(e.svc.metrics.suppressed); got != flood-quiet.DefaultBurst {
		t.Errorf("unreported = %v, want %d", got, flood-quiet.DefaultBurst)
	}

	e.auth.principal = Principal{Namespace: "prod", ServiceAccount: "intruder"}
	if _, err := e.client.Bootstrap(t.Context(), request(t)); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("intruder: %v", err)
	}
	all := e.reporter.all()
	if last := all[len(all)-1]; last.Reason != ReasonNotAllowed || last.Principal.ServiceAccount != "intruder" {
		t.Errorf("last report %+v, want the intruder's refusal", last)
	}
}
