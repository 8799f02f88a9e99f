package health_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"coxswain.dev/coxswain/proxy/internal/clock"
	"coxswain.dev/coxswain/proxy/internal/health"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newTracker(t *testing.T) (*health.Tracker, *clock.Fake, *prometheus.Registry) {
	t.Helper()
	clk := clock.NewFake(epoch)
	reg := prometheus.NewRegistry()
	tr, err := health.NewTracker(clk, reg)
	if err != nil {
		t.Fatal(err)
	}
	return tr, clk, reg
}

func TestTrackerStates(t *testing.T) {
	t.Parallel()
	closed := errors.New("rpc error: code = Unavailable desc = connection refused")
	tests := []struct {
		name       string
		events     func(*health.Tracker, *clock.Fake)
		want       health.State
		wantReason string
	}{
		{"a new proxy is NotReady", func(*health.Tracker, *clock.Fake) {}, health.NotReady, "NotReady: waiting for an SVID"},
		{"a failed bootstrap before any snapshot is NotReady with the reason", func(tr *health.Tracker, _ *clock.Fake) {
			tr.BootstrapFailed(errors.New("bootstrap at x: denied"))
		}, health.NotReady, "NotReady: bootstrap: bootstrap at x: denied"},
		{"an open stream without a snapshot is NotReady", func(tr *health.Tracker, _ *clock.Fake) {
			tr.SVIDIssued(epoch.Add(time.Hour))
			tr.StreamOpened()
		}, health.NotReady, "NotReady: streaming, waiting for a snapshot"},
		{"a refused first snapshot is NotReady", func(tr *health.Tracker, _ *clock.Fake) {
			tr.StreamOpened()
			tr.SnapshotRejected("v1", errors.New("bad"))
		}, health.NotReady, "NotReady: snapshot v1 rejected: bad"},
		{"an applied snapshot on a live stream is Ready", func(tr *health.Tracker, clk *clock.Fake) {
			tr.StreamOpened()
			tr.SnapshotApplied("v1")
			clk.Advance(3 * time.Second)
		}, health.Ready, "Ready: streaming (serving snapshot v1 applied 3s ago)"},
		{"a closed stream after a snapshot is Degraded", func(tr *health.Tracker, clk *clock.Fake) {
			tr.StreamOpened()
			tr.SnapshotApplied("v1")
			tr.StreamClosed(closed)
			clk.Advance(12 * time.Second)
		}, health.Degraded, "Degraded: stream closed: " + closed.Error() + " (serving snapshot v1 applied 12s ago)"},
		{"a failed renewal on a live stream stays Ready", func(tr *health.Tracker, _ *clock.Fake) {
			tr.StreamOpened()
			tr.SnapshotApplied("v1")
			tr.BootstrapFailed(errors.New("unavailable"))
		}, health.Ready, "Ready: streaming (serving snapshot v1 applied 0s ago)"},
		{"a refused later snapshot is Degraded and names it", func(tr *health.Tracker, _ *clock.Fake) {
			tr.StreamOpened()
			tr.SnapshotApplied("v1")
			tr.SnapshotRejected("v2", errors.New("bad route"))
		}, health.Degraded, "Degraded: snapshot v2 rejected: bad route (serving snapshot v1 applied 0s ago)"},
		{"a reconnected stream is Ready again only after a new snapshot", func(tr *health.Tracker, _ *clock.Fake) {
			tr.StreamOpened()
			tr.SnapshotApplied("v1")
			tr.StreamClosed(closed)
			tr.StreamOpened()
		}, health.Degraded, "Degraded: streaming, waiting for a snapshot (serving snapshot v1 applied 0s ago)"},
		{"a permanent stop before any snapshot is NotReady with the reason", func(tr *health.Tracker, _ *clock.Fake) {
			tr.Stopped(errors.New("wire version mismatch: server speaks 2"))
		}, health.NotReady, "NotReady: stopped retrying: wire version mismatch: server speaks 2"},
		{"a permanent stop after a snapshot is Degraded with the reason", func(tr *health.Tracker, _ *clock.Fake) {
			tr.StreamOpened()
			tr.SnapshotApplied("v1")
			tr.StreamClosed(closed)
			tr.Stopped(errors.New("wire version mismatch"))
		}, health.Degraded, "Degraded: stopped retrying: wire version mismatch (serving snapshot v1 applied 0s ago)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr, clk, reg := newTracker(t)
			tt.events(tr, clk)
			s := tr.Status()
			if s.State != tt.want || s.String() != tt.wantReason {
				t.Fatalf("status %q, want %q", s.String(), tt.wantReason)
			}
			for _, st := range health.States {
				want := 0.0
				if st == tt.want {
					want = 1
				}
				g, err := reg.Gather()
				if err != nil {
					t.Fatal(err)
				}
				if got := gaugeValue(g, "coxswain_proxy_discovery_state", st.String()); got != want {
					t.Fatalf("state gauge %s = %v, want %v", st, got, want)
				}
			}
		})
	}
}

func TestHandler(t *testing.T) {
	t.Parallel()
	tr, clk, reg := newTracker(t)
	srv := httptest.NewServer(health.Handler(tr, reg))
	t.Cleanup(srv.Close)

	wantGet(t, srv.URL+"/healthz", http.StatusOK, "ok")
	wantGet(t, srv.URL+"/readyz", http.StatusServiceUnavailable, "NotReady: waiting for an SVID")

	tr.SVIDIssued(epoch.Add(time.Hour))
	tr.StreamOpened()
	tr.SnapshotApplied("abc")
	wantGet(t, srv.URL+"/readyz", http.StatusOK, "Ready: streaming (serving snapshot abc applied 0s ago)")

	tr.StreamClosed(errors.New("EOF"))
	clk.Advance(90 * time.Second)
	wantGet(t, srv.URL+"/readyz", http.StatusOK, "Degraded: stream closed: EOF (serving snapshot abc applied 1m30s ago)")
	wantGet(t, srv.URL+"/healthz", http.StatusOK, "ok")

	tr.StreamOpened()
	tr.SnapshotRejected("def", errors.New("bad"))
	tr.SnapshotApplied("ghi")
	metrics := get(t, srv.URL+"/metrics")
	for _, line := range []string{
		"coxswain_proxy_svid_expiry_seconds 3510",
		"coxswain_proxy_snapshot_age_seconds 0",
		"coxswain_proxy_snapshots_applied_total 2",
		"coxswain_proxy_snapshots_rejected_total 1",
		"coxswain_proxy_stream_reconnects_total 1",
		"coxswain_proxy_svids_issued_total 1",
		`coxswain_proxy_discovery_state{state="Ready"} 1`,
	} {
		if !strings.Contains(metrics, line+"\n") {
			t.Errorf("metrics lack %q:\n%s", line, metrics)
		}
	}
}

// Tests that a draining proxy fails readiness whatever its control channel says, and keeps
// /healthz passing: the kubelet must not restart a proxy that is finishing its connections.
func TestDrainingFailsReadinessOnly(t *testing.T) {
	t.Parallel()
	tr, _, reg := newTracker(t)
	srv := httptest.NewServer(health.Handler(tr, reg))
	t.Cleanup(srv.Close)
	tr.StreamOpened()
	tr.SnapshotApplied("abc")
	wantGet(t, srv.URL+"/readyz", http.StatusOK, "Ready: streaming (serving snapshot abc applied 0s ago)")
	if m := get(t, srv.URL+"/metrics"); !strings.Contains(m, "coxswain_proxy_draining 0\n") {
		t.Errorf("metrics lack coxswain_proxy_draining 0:\n%s", m)
	}

	tr.Drain()
	const draining = "Draining: shutting down; Ready: streaming (serving snapshot abc applied 0s ago)"
	wantGet(t, srv.URL+"/readyz", http.StatusServiceUnavailable, draining)
	tr.StreamClosed(errors.New("EOF"))
	tr.StreamOpened()
	tr.SnapshotApplied("def")
	wantGet(t, srv.URL+"/readyz", http.StatusServiceUnavailable,
		"Draining: shutting down; Ready: streaming (serving snapshot def applied 0s ago)")
	wantGet(t, srv.URL+"/healthz", http.StatusOK, "ok")
	if m := get(t, srv.URL+"/metrics"); !strings.Contains(m, "coxswain_proxy_draining 1\n") {
		t.Errorf("metrics lack coxswain_proxy_draining 1:\n%s", m)
	}
}

func TestNewTrackerRefusesADoubleRegistration(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	if _, err := health.NewTracker(nil, reg); err != nil {
		t.Fatal(err)
	}
	if _, err := health.NewTracker(nil, reg); err == nil {
		t.Fatal("a second tracker registered the same metrics")
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n == 0 {
		t.Fatalf("gathered %d metrics, %v", n, err)
	}
}

func wantGet(t *testing.T, url string, code int, body string) {
	t.Helper()
	resp, err := http.Get(url) //nolint:noctx // a test against a local server
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != code || strings.TrimSpace(string(b)) != body {
		t.Fatalf("GET %s = %d %q, want %d %q", url, resp.StatusCode, b, code, body)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url) //nolint:noctx // a test against a local server
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
