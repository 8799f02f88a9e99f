package rebuild

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/internal/scopeauth"
)

// histograms returns the sample count and sum of every series of the histogram name, keyed by
// the value of its only label.
func histograms(t *testing.T, reg *prometheus.Registry, name string) map[string]*dto.Histogram {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.Histogram{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetHistogram()
		}
	}
	return out
}

func counts(h map[string]*dto.Histogram) map[string]uint64 {
	out := map[string]uint64{}
	for label, v := range h {
		out[label] = v.GetSampleCount()
	}
	return out
}

// measuredPipeline returns a pipeline of a follower (it writes no status) whose metrics are
// registered with the registry it returns.
func measuredPipeline(t *testing.T) (*Pipeline, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	return &Pipeline{Cache: cache.New(nil), Authority: scopeauth.New(), IsLeader: func() bool { return false }, Metrics: m}, reg
}

// Tests that every new snapshot version is measured once, by scope kind, with its encoded size,
// and that a rebuild of an unchanged world measures nothing.
func TestPipelineMeasuresTheSnapshotsItPublishes(t *testing.T) {
	t.Parallel()
	p, reg := measuredPipeline(t)
	res, err := p.Rebuild(context.Background(), input(t, world))
	if err != nil {
		t.Fatal(err)
	}
	sizes := histograms(t, reg, "coxswain_rebuild_snapshot_bytes")
	if diff := cmp.Diff(map[string]uint64{"gateway": 1, "shared-pool": 1}, counts(sizes)); diff != "" {
		t.Fatalf("snapshots measured by scope kind (-want +got):\n%s", diff)
	}
	for kind, h := range sizes {
		// One listener resource: its key, type URL and payload take more than 50 bytes.
		if h.GetSampleSum() < 50 {
			t.Errorf("%s snapshot measured %v bytes", kind, h.GetSampleSum())
		}
	}
	for _, s := range res.Changed {
		// What a proxy of the scope receives: the full snapshot's encoding, nonce left out.
		full, err := proto.Marshal(&discoveryv1.Snapshot{Version: p.Cache.Get(s).Version(), Full: true, Resources: p.Cache.Get(s).Resources()})
		if err != nil {
			t.Fatal(err)
		}
		if got := sizes[scopeKind(s)].GetSampleSum(); got != float64(len(full)) {
			t.Errorf("%s snapshot measured %v bytes, its full encoding has %d", s, got, len(full))
		}
	}
	for _, s := range res.Changed {
		if got, want := res.Versions[s], p.Cache.Get(s).Version(); got != want {
			t.Errorf("result names version %q of %s, the cache holds %q", got, s, want)
		}
	}

	if _, err := p.Rebuild(context.Background(), input(t, world)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]uint64{"gateway": 1, "shared-pool": 1}, counts(histograms(t, reg, "coxswain_rebuild_snapshot_bytes"))); diff != "" {
		t.Errorf("an unchanged world measured snapshots (-want +got):\n%s", diff)
	}
}

func TestObserveRebuildLabelsByTrigger(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveRebuild(Trigger{"HTTPRoute": 2}, 3*time.Millisecond)
	m.ObserveRebuild(Trigger{"HTTPRoute": 1}, 5*time.Millisecond)
	m.ObserveRebuild(Trigger{"Service": 1, "EndpointSlice": 1}, time.Millisecond)
	m.ObserveRebuild(Trigger{}, time.Millisecond)
	got := histograms(t, reg, "coxswain_rebuild_duration_seconds")
	if diff := cmp.Diff(map[string]uint64{"HTTPRoute": 2, "Multiple": 1, "None": 1}, counts(got)); diff != "" {
		t.Fatalf("rebuilds by trigger (-want +got):\n%s", diff)
	}
	if sum := got["HTTPRoute"].GetSampleSum(); sum < 0.0079 || sum > 0.0081 {
		t.Errorf("HTTPRoute rebuilds took %vs in all, want 0.008", sum)
	}
	var nilMetrics *Metrics
	nilMetrics.ObserveRebuild(Trigger{"HTTPRoute": 1}, time.Second) // records nothing, and does not panic
}

func TestNewMetricsRefusesASecondRegistration(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	if _, err := NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Fatal("registered the rebuild metrics twice")
	}
}
