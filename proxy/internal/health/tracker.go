package health

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"coxswain.dev/coxswain/proxy/internal/clock"
)

// Tracker records what the agent reports and answers the proxy's status. It implements the
// agent's Observer and is safe for concurrent use.
type Tracker struct {
	clock   clock.Clock
	metrics *metrics

	mu sync.Mutex
	// connected: a stream is subscribed; inSync: its latest snapshot was applied.
	connected bool
	inSync    bool
	streams   int
	reason    string
	stopped   string
	draining  bool
	version   string
	appliedAt time.Time
	notAfter  time.Time
}

// NewTracker returns a tracker reading clk (the wall clock when nil) that registers its
// metrics with reg when reg is not nil.
func NewTracker(clk clock.Clock, reg prometheus.Registerer) (*Tracker, error) {
	if clk == nil {
		clk = clock.Real()
	}
	t := &Tracker{clock: clk, reason: "waiting for an SVID"}
	m := newMetrics(t)
	if err := m.register(reg); err != nil {
		return nil, err
	}
	t.metrics = m
	t.metrics.setState(NotReady)
	return t, nil
}

// SVIDIssued records a new SVID valid until notAfter.
func (t *Tracker) SVIDIssued(notAfter time.Time) {
	t.update(func() {
		t.notAfter = notAfter
		if !t.connected {
			t.reason = "SVID issued, connecting"
		}
	})
	t.metrics.svids.Inc()
}

// BootstrapFailed records a failed bootstrap. It changes the reason only while no stream is up:
// a failed renewal does not interrupt a live stream.
func (t *Tracker) BootstrapFailed(err error) {
	t.update(func() {
		if !t.connected {
			t.reason = "bootstrap: " + err.Error()
		}
	})
}

// StreamOpened records a subscribed stream; every stream after the first counts as a reconnect.
func (t *Tracker) StreamOpened() {
	t.update(func() {
		t.connected, t.inSync = true, false
		t.reason = "streaming, waiting for a snapshot"
		t.streams++
		if t.streams > 1 {
			t.metrics.reconnects.Inc()
		}
	})
}

// StreamClosed records the end of a stream and why.
func (t *Tracker) StreamClosed(err error) {
	t.update(func() {
		t.connected, t.inSync = false, false
		t.reason = "stream closed: " + err.Error()
	})
}

// SnapshotApplied records that the snapshot at version now serves.
func (t *Tracker) SnapshotApplied(version string) {
	t.update(func() {
		t.version, t.appliedAt = version, t.clock.Now()
		t.inSync = t.connected
		t.reason = "streaming"
	})
	t.metrics.applied.Inc()
}

// SnapshotRejected records a snapshot that was refused; the previous one keeps serving.
func (t *Tracker) SnapshotRejected(version string, err error) {
	t.update(func() {
		t.inSync = false
		t.reason = fmt.Sprintf("snapshot %s rejected: %v", version, err)
	})
	t.metrics.rejected.Inc()
}

// Stopped records that the agent gave up for good, for example on a wire-version mismatch.
func (t *Tracker) Stopped(err error) {
	t.update(func() {
		t.connected, t.inSync = false, false
		t.stopped = "stopped retrying: " + err.Error()
	})
}

// Drain records that the proxy is shutting down: from now on /readyz fails, whatever the
// control channel does, so that the endpoints of its Services drop it while it keeps serving
// the connections it has and those that still arrive.
func (t *Tracker) Drain() {
	t.update(func() { t.draining = true })
	t.metrics.draining.Set(1)
}

func (t *Tracker) update(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f()
	t.metrics.setState(t.stateLocked())
}

// Status returns the current status.
func (t *Tracker) Status() Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := Status{State: t.stateLocked(), Reason: t.reason, Version: t.version, Draining: t.draining}
	if t.stopped != "" {
		s.Reason = t.stopped
	}
	if t.version != "" {
		s.AppliedAgo = t.clock.Now().Sub(t.appliedAt)
	}
	return s
}

func (t *Tracker) stateLocked() State {
	switch {
	case t.version == "":
		return NotReady
	case t.connected && t.inSync && t.stopped == "":
		return Ready
	default:
		return Degraded
	}
}

// svidExpiresIn returns the seconds until the SVID expires, 0 without one.
func (t *Tracker) svidExpiresIn() float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.notAfter.IsZero() {
		return 0
	}
	return t.notAfter.Sub(t.clock.Now()).Seconds()
}

// snapshotAge returns the seconds since the last snapshot was applied, 0 before the first.
func (t *Tracker) snapshotAge() float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.version == "" {
		return 0
	}
	return t.clock.Now().Sub(t.appliedAt).Seconds()
}
