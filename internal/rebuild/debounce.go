package rebuild

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// DefaultInterval is the shortest time between the starts of two rebuilds.
const DefaultInterval = 10 * time.Millisecond

// Debouncer turns triggers into calls with a leading edge: a trigger that finds the debouncer
// idle (no call in the last spacing) calls at once, with no holdoff; triggers that arrive within
// the spacing after a call coalesce into one call when it ends, so a steady stream of changes
// calls at most once per spacing and never waits longer than that. The spacing is the interval,
// or twice what the last call's work took when that is longer (see Cost): rebuilds then never
// take more than half of a core, however large the cluster, while a small one propagates in a
// few milliseconds. It is safe for concurrent use.
type Debouncer struct {
	clock    clock.Clock
	interval time.Duration
	nudge    chan struct{}

	mu      sync.Mutex
	pending bool
	// cost is how long the last call's work took, as Cost reported it.
	cost time.Duration
	// last is when the previous call was made; zero before the first.
	last time.Time
}

// NewDebouncer returns a Debouncer. A zero interval takes the default, and a nil clock is the
// real one.
func NewDebouncer(interval time.Duration, clk clock.Clock) *Debouncer {
	if interval <= 0 {
		interval = DefaultInterval
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Debouncer{clock: clk, interval: interval, nudge: make(chan struct{}, 1)}
}

// Trigger records a change. It never blocks.
func (d *Debouncer) Trigger() {
	d.mu.Lock()
	d.pending = true
	d.mu.Unlock()
	select {
	case d.nudge <- struct{}{}:
	default:
	}
}

// Cost reports how long the work of the last call took.
func (d *Debouncer) Cost(took time.Duration) {
	d.mu.Lock()
	d.cost = took
	d.mu.Unlock()
}

// Run calls fire for pending triggers until ctx ends. It triggers once at start, so the first
// call happens at once even when nothing changes. Call it once.
func (d *Debouncer) Run(ctx context.Context, fire func()) {
	d.Trigger()
	for {
		wait, pending := d.next()
		switch {
		case !pending:
			select {
			case <-ctx.Done():
				return
			case <-d.nudge:
			}
		case wait <= 0:
			fire()
		default:
			if !d.sleep(ctx, wait) {
				return
			}
		}
	}
}

// next reports whether triggers are pending and how long until they may be called. Due
// triggers are consumed: the call about to happen handles them.
func (d *Debouncer) next() (time.Duration, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.pending {
		return 0, false
	}
	now := d.clock.Now()
	var wait time.Duration
	if !d.last.IsZero() {
		wait = d.last.Add(max(d.interval, 2*d.cost)).Sub(now)
	}
	if wait <= 0 {
		d.pending, d.last = false, now
	}
	return wait, true
}

// sleep waits for wait or until ctx ends, and reports whether ctx is still live. Triggers do not
// interrupt it: they are pending already, and next measures again on waking.
func (d *Debouncer) sleep(ctx context.Context, wait time.Duration) bool {
	timer := d.clock.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C():
		return true
	}
}
