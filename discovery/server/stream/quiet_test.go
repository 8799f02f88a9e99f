package stream

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/internal/quiet"
)

// Tests that a flood of one refusal is counted in full but logged only a few times, and does
// not hide a refusal of another identity.
func TestRefusalFloodIsLoggedSparingly(t *testing.T) {
	t.Parallel()
	var lines atomic.Int32
	var lastRefused atomic.Value
	logger := funcr.New(func(_, args string) {
		if strings.Contains(args, `"Refused stream"`) {
			lines.Add(1)
			lastRefused.Store(args)
		}
	}, funcr.Options{})
	e := newEnv(t, func(c *Config) { c.Logger = logger })
	const flood = 30
	for range flood {
		if _, err := e.subscribe(t, webID, "n", apiScope).recv(); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("got %v, want PermissionDenied", err)
		}
	}
	if got := testutil.ToFloat64(e.srv.metrics.denied.WithLabelValues(string(ReasonScopeNotAuthorized))); got != flood {
		t.Errorf("closed{ScopeNotAuthorized} = %v, want %d", got, flood)
	}
	if got := lines.Load(); got != quiet.DefaultBurst {
		t.Errorf("%d refusals logged, want %d", got, quiet.DefaultBurst)
	}
	if _, err := e.subscribe(t, apiID, "n", cache.SharedPool()).recv(); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("got %v, want PermissionDenied", err)
	}
	if last, _ := lastRefused.Load().(string); !strings.Contains(last, apiID) {
		t.Errorf("the other identity's refusal was not logged; last line %s", last)
	}
}
