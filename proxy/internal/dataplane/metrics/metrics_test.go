package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"coxswain.dev/coxswain/proxy/internal/dataplane/metrics"
)

// Tests that route counters count by route and status on the registry given, and that a nil
// Metrics records nothing without failing.
func TestRouteCounters(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, func() float64 { return 3 })
	if err != nil {
		t.Fatal(err)
	}
	rc := m.Route("ns/r/0/0")
	for _, s := range []int{200, 200, 503} {
		rc.Inc(s)
	}
	m.Unmatched().Inc(404)
	want := `
# HELP coxswain_proxy_requests_total Requests answered, by route (empty when none matched) and status code.
# TYPE coxswain_proxy_requests_total counter
coxswain_proxy_requests_total{code="404",route=""} 1
coxswain_proxy_requests_total{code="200",route="ns/r/0/0"} 2
coxswain_proxy_requests_total{code="503",route="ns/r/0/0"} 1
# HELP coxswain_proxy_active_connections Open downstream connections.
# TYPE coxswain_proxy_active_connections gauge
coxswain_proxy_active_connections 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "coxswain_proxy_requests_total", "coxswain_proxy_active_connections"); err != nil {
		t.Error(err)
	}
	var none *metrics.Metrics
	none.Route("x").Inc(200)
	none.Observe(0)
	none.UpstreamError("c", "connect")
}

func BenchmarkRouteCountersInc(b *testing.B) {
	m, err := metrics.New(prometheus.NewRegistry(), func() float64 { return 0 })
	if err != nil {
		b.Fatal(err)
	}
	rc := m.Route("ns/r/0/0")
	b.ReportAllocs()
	for b.Loop() {
		rc.Inc(200)
	}
}
