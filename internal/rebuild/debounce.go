package rebuild

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// DefaultInterval is the shortest time between the starts of two rebuilds.
const DefaultInterval = 10 * time.Millisecond

// costBurst is how much work beyond the half-core budget calls may run back to back before they
// are spaced (see Debouncer): with 40 ms rebuilds, about 25 changes in a row are each rebuilt at
// once.
const costBurst = time.Second

// Debouncer turns triggers into calls with a leading edge: a trigger that finds the debouncer
// idle (no call in the last interval, and the work budget not spent) calls at once, with no
// holdoff; triggers that arrive while it may not call coalesce into one call when it may, so a
// steady stream of changes calls at most once per interval and never waits longer than the
// spacing below.
//
// The work budget keeps calls under half of a core however large the cluster, without making
// an occasional change wait: each call's work, reported by Cost, counts twice against a budget
// that refills with wall-clock time, and a call waits only while more than costBurst of it is
// spent. Occasional changes, even costly ones in quick succession, are called at once; a steady
// stream of calls that each take c ends up spaced 2c apart. It is safe for concurrent use.
type Debouncer struct {
	clock    clock.Clock
	interval time.Duration
	nudge    chan struct{}

	mu      sync.Mutex
	pending bool
	// spent is the work budget in use, as of spentAt: twice each call's reported work, less the
	// wall-clock time since.
	spent   time.Duration
	spentAt time.Time
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

// Cost reports how long the work of a call took.
func (d *Debouncer) Cost(took time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.refill(d.clock.Now())
	d.spent += 2 * took
}

// refill returns the wall-clock time since the last refill to the budget. Callers hold mu.
func (d *Debouncer) refill(now time.Time) {
	if !d.spentAt.IsZero() {
		d.spent = max(0, d.spent-now.Sub(d.spentAt))
	}
	d.spentAt = now
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
	d.refill(now)
	wait := d.spent - costBurst
	if !d.last.IsZero() {
		wait = max(wait, d.last.Add(d.interval).Sub(now))
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
