package stream

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/wrapperspb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/cache"
)

// Tests that a version is observed once, when the last live stream of its scope acknowledges
// it, timed from its Set.
func TestConvergence(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	version := func(v string) *cache.Snapshot {
		r, err := cache.NewResource("listener", wrapperspb.String(v))
		if err != nil {
			t.Fatal(err)
		}
		s, err := cache.NewSnapshot([]*discoveryv1.Resource{r}, t0)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s1, s2 := version("1"), version("2")
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	// Each step is "join a", "leave a", or "ack a 1 2 30": stream a acknowledges version 1 while
	// version 2 is current, 30 ms after t0.
	cases := []struct {
		name  string
		steps []string
		want  []time.Duration
	}{
		{
			name:  "a version converges when every live stream acknowledged it",
			steps: []string{"join a", "join b", "ack a 1 1 10", "ack b 1 1 30"},
			want:  []time.Duration{ms(30)},
		},
		{
			name:  "a stream that leaves without acknowledging no longer holds it back",
			steps: []string{"join a", "join b", "ack a 1 1 10", "leave b"},
			want:  []time.Duration{ms(10)},
		},
		{
			name:  "a stream that joins before convergence must acknowledge too",
			steps: []string{"join a", "join b", "ack a 1 1 10", "join c", "ack b 1 1 20", "ack c 1 1 40"},
			want:  []time.Duration{ms(40)},
		},
		{
			name:  "a converged version is observed once",
			steps: []string{"join a", "ack a 1 1 10", "join b", "ack b 1 1 20"},
			want:  []time.Duration{ms(10)},
		},
		{
			name:  "a newer version is followed from its first acknowledgement",
			steps: []string{"join a", "join b", "ack a 1 1 10", "ack a 2 2 20", "ack b 1 2 30", "ack b 2 2 40"},
			want:  []time.Duration{ms(40)},
		},
		{
			name:  "a version first acknowledged after it was superseded is not followed",
			steps: []string{"join a", "ack a 1 2 10"},
		},
		{
			name:  "a stream that leaves takes its acknowledgement with it",
			steps: []string{"join a", "join b", "join c", "ack a 1 1 10", "leave a", "ack b 1 1 20"},
		},
		{
			name:  "a scope with no stream left starts over",
			steps: []string{"join a", "leave a", "join b", "ack b 1 1 50"},
			want:  []time.Duration{ms(50)},
		},
	}
	snaps := map[string]*cache.Snapshot{"1": s1, "2": s2}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got []time.Duration
			c := newConvergence(func(_ cache.Scope, snap *cache.Snapshot, lastAck time.Time) {
				got = append(got, lastAck.Sub(snap.CreatedAt()))
			})
			sessions := map[string]*session{}
			for _, step := range tc.steps {
				f := strings.Fields(step)
				verb, name := f[0], f[1]
				sess := sessions[name]
				if sess == nil {
					sess = &session{scope: webScope, nodeID: name}
					sessions[name] = sess
				}
				switch verb {
				case "join":
					c.join(sess)
				case "leave":
					c.leave(sess)
				case "ack":
					c.ack(sess, snaps[f[2]], snaps[f[3]], t0.Add(ms(atoi(t, f[4]))))
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("observations (-want +got):\n%s", diff)
			}
		})
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// histogramCount returns the number of observations of the histogram named name.
func (e *env) histogramCount(t *testing.T, name string) uint64 {
	t.Helper()
	mfs, err := e.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

// Tests that the streams of a scope share one encoding of each full snapshot and each delta,
// that a stream of another scope gets its own scope's, and that the scope's version is
// observed as converged once the last of its streams acknowledged it.
func TestFanoutSharesOneEncodingPerVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.set(t, webScope, map[string]string{"a": "1", "b": "1"})
	var web []*proxy
	for i := range 3 {
		p := e.subscribe(t, webID, "web-"+strconv.Itoa(i), webScope)
		s := p.mustRecv()
		expect(t, s, true, map[string]string{"a": "1", "b": "1"}, nil)
		p.ack(s)
		web = append(web, p)
	}
	api := e.subscribe(t, apiID, "api", apiScope)
	s := api.mustRecv()
	expect(t, s, true, map[string]string{"listener": apiScope.String()}, nil)
	api.ack(s)
	waitFor(t, "four ACKs", func() bool { return testutil.ToFloat64(e.srv.metrics.acks) == 4 })
	if got := testutil.ToFloat64(e.srv.metrics.encoded.WithLabelValues("full")); got != 2 {
		t.Errorf("full snapshots encoded = %v, want 2 (one per scope)", got)
	}
	if got := testutil.ToFloat64(e.srv.metrics.sent.WithLabelValues("full")); got != 4 {
		t.Errorf("full snapshots sent = %v, want 4", got)
	}

	before := e.histogramCount(t, "coxswain_discovery_snapshot_convergence_seconds")
	e.set(t, webScope, map[string]string{"a": "2", "b": "1"})
	var deltas []*discoveryv1.Snapshot
	for _, p := range web {
		d := p.mustRecv()
		expect(t, d, false, map[string]string{"a": "2"}, nil)
		deltas = append(deltas, d)
	}
	web[0].ack(deltas[0])
	web[1].ack(deltas[1])
	waitFor(t, "six ACKs", func() bool { return testutil.ToFloat64(e.srv.metrics.acks) == 6 })
	if got := e.histogramCount(t, "coxswain_discovery_snapshot_convergence_seconds"); got != before {
		t.Fatalf("version observed as converged with one stream yet to acknowledge it")
	}
	web[2].ack(deltas[2])
	waitFor(t, "the version to converge", func() bool {
		return e.histogramCount(t, "coxswain_discovery_snapshot_convergence_seconds") == before+1
	})
	if got := testutil.ToFloat64(e.srv.metrics.encoded.WithLabelValues("delta")); got != 1 {
		t.Errorf("deltas encoded = %v, want 1", got)
	}
	if got := testutil.ToFloat64(e.srv.metrics.sent.WithLabelValues("delta")); got != 3 {
		t.Errorf("deltas sent = %v, want 3", got)
	}
}

// Tests that the size gauge reports every scope in the cache, and drops a deleted one.
func TestEncodedSizeGauge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.set(t, webScope, map[string]string{"a": "a value of some length"})
	sizes := func() map[string]float64 {
		mfs, err := e.registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() != "coxswain_discovery_snapshot_encoded_bytes" {
				continue
			}
			for _, m := range mf.GetMetric() {
				out[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
		}
		return out
	}
	want := map[string]float64{}
	for _, s := range []cache.Scope{cache.SharedPool(), webScope, apiScope} {
		body, _, err := e.cache.Get(s).Encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		want[s.String()] = float64(len(body))
	}
	if diff := cmp.Diff(want, sizes()); diff != "" {
		t.Fatalf("sizes (-want +got):\n%s", diff)
	}
	e.cache.Delete(apiScope)
	delete(want, apiScope.String())
	if diff := cmp.Diff(want, sizes()); diff != "" {
		t.Fatalf("sizes after a deletion (-want +got):\n%s", diff)
	}
}

// Tests that a version the controller stamped with the time of the object change it includes is
// timed from that change once its last stream acknowledges it, and that a version without the
// stamp is timed from its Set only.
func TestChangeConvergenceFromTheObjectChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const changes = "coxswain_discovery_change_convergence_seconds"
	e.set(t, webScope, map[string]string{"a": "1"})
	p := e.subscribe(t, webID, "web-0", webScope)
	s := p.mustRecv()
	p.ack(s)
	waitFor(t, "the first version to converge", func() bool {
		return e.histogramCount(t, "coxswain_discovery_snapshot_convergence_seconds") == 1
	})
	if got := e.histogramCount(t, changes); got != 0 {
		t.Fatalf("a version without a change time was observed from its change (%d samples)", got)
	}

	r, err := cache.NewResource("a", wrapperspb.String("2"))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := cache.NewSnapshot([]*discoveryv1.Resource{r}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	const ago = time.Hour
	snap.SetChangedAt(time.Now().Add(-ago))
	if changed, err := e.cache.SetSnapshot(webScope, snap); err != nil || !changed {
		t.Fatalf("SetSnapshot = %v, %v", changed, err)
	}
	d := p.mustRecv()
	expect(t, d, false, map[string]string{"a": "2"}, nil)
	p.ack(d)
	waitFor(t, "the stamped version to converge", func() bool { return e.histogramCount(t, changes) == 1 })
	mfs, err := e.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != changes {
			continue
		}
		// Set and ACK happen within the test's run, so the sum is the hour ago and a little.
		if sum := mf.GetMetric()[0].GetHistogram().GetSampleSum(); sum < ago.Seconds() || sum > ago.Seconds()+60 {
			t.Errorf("change to convergence = %.1fs, want about %.0fs", sum, ago.Seconds())
		}
	}
}

// Tests that OnConverged hears each converged version with its scope and the time of the last
// acknowledgement, once, beside the convergence histogram.
func TestOnConvergedHearsEachConvergedVersion(t *testing.T) {
	t.Parallel()
	type heard struct {
		scope   cache.Scope
		version string
		lastAck time.Time
	}
	got := make(chan heard, 4)
	e := newEnv(t, func(c *Config) {
		c.OnConverged = func(scope cache.Scope, snap *cache.Snapshot, lastAck time.Time) {
			got <- heard{scope, snap.Version(), lastAck}
		}
	})
	e.set(t, webScope, map[string]string{"a": "1"})
	p := e.subscribe(t, webID, "web-0", webScope)
	s := p.mustRecv()
	p.ack(s)
	select {
	case h := <-got:
		if h.scope != webScope || h.version != e.cache.Get(webScope).Version() || h.lastAck.Before(e.cache.Get(webScope).CreatedAt()) {
			t.Errorf("heard %+v, want scope %s version %s acknowledged after its Set", h, webScope, e.cache.Get(webScope).Version())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OnConverged never called")
	}
	select {
	case h := <-got:
		t.Errorf("heard %+v again", h)
	case <-time.After(100 * time.Millisecond):
	}
}
