package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics of the operator's that split a probe's time: from the change's watch event to the
// last proxy's ACK of the version it made, and the rebuilds meanwhile.
const (
	changeConvergenceMetric = "coxswain_discovery_change_convergence_seconds"
	rebuildDurationMetric   = "coxswain_rebuild_duration_seconds"
)

// operatorTotals are the sums and counts of the operator's histograms that a probe's breakdown
// is the difference of.
type operatorTotals struct {
	convergeSum, rebuildSum float64
	convergeN, rebuildN     uint64
}

// breakdown is what the operator's metrics say of the probes of one row: per probe, the mean
// time from the change's watch event to the last ACK of the versions it made, and the mean
// rebuild and the rebuilds it took.
type breakdown struct {
	converge, rebuild []time.Duration
	rebuilds          []uint64
}

// scrapeOperator reads the operator's metrics endpoint. With wantConverged above the current
// count of converged versions it waits (up to a second) for that many: a proxy serves a new
// version before its ACK reaches the operator.
func (b *propagation) scrapeOperator(ctx context.Context, t *testing.T, wantConverged uint64) operatorTotals {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		got, err := scrapeTotals(ctx, loopback(OperatorMetricsPort))
		if err != nil {
			t.Fatalf("scrape the operator's metrics: %v", err)
		}
		if got.convergeN >= wantConverged || time.Now().After(deadline) {
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func scrapeTotals(ctx context.Context, addr string) (operatorTotals, error) {
	var out operatorTotals
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return out, err
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return out, fmt.Errorf("status %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return out, err
	}
	if families[changeConvergenceMetric] == nil {
		return out, fmt.Errorf("no %s", changeConvergenceMetric)
	}
	for _, m := range families[changeConvergenceMetric].GetMetric() {
		out.convergeSum += m.GetHistogram().GetSampleSum()
		out.convergeN += m.GetHistogram().GetSampleCount()
	}
	for _, m := range families[rebuildDurationMetric].GetMetric() {
		out.rebuildSum += m.GetHistogram().GetSampleSum()
		out.rebuildN += m.GetHistogram().GetSampleCount()
	}
	return out, nil
}

// add records one probe: the difference between the totals before and after it.
func (bd *breakdown) add(before, after operatorTotals) {
	mean := func(sum float64, n uint64) time.Duration {
		if n == 0 {
			return 0
		}
		return time.Duration(sum / float64(n) * float64(time.Second))
	}
	if n := after.convergeN - before.convergeN; n > 0 {
		bd.converge = append(bd.converge, mean(after.convergeSum-before.convergeSum, n))
	}
	n := after.rebuildN - before.rebuildN
	bd.rebuilds = append(bd.rebuilds, n)
	if n > 0 {
		bd.rebuild = append(bd.rebuild, mean(after.rebuildSum-before.rebuildSum, n))
	}
}

func (bd *breakdown) meanRebuilds() float64 {
	if len(bd.rebuilds) == 0 {
		return 0
	}
	var sum uint64
	for _, n := range bd.rebuilds {
		sum += n
	}
	return float64(sum) / float64(len(bd.rebuilds))
}
