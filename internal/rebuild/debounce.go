package rebuild

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Default debounce delays.
const (
	DefaultHoldoff  = 100 * time.Millisecond
	DefaultMaxDelay = time.Second
)

// Debouncer coalesces bursts of triggers into single calls: a burst fires once no trigger has
// arrived for the holdoff, and at the latest the maximum delay after its first trigger, so a
// steady stream of changes still rebuilds regularly. A trigger that arrives while the callback
// runs starts the next burst. It is safe for concurrent use.
type Debouncer struct {
	clock    clock.Clock
	holdoff  time.Duration
	maxDelay time.Duration
	nudge    chan struct{}

	mu    sync.Mutex
	burst burst
}

// NewDebouncer returns a Debouncer. A zero holdoff or maximum delay takes its default, a maximum
// delay below the holdoff is raised to it, and a nil clock is the real one.
func NewDebouncer(holdoff, maxDelay time.Duration, clk clock.Clock) *Debouncer {
	if holdoff <= 0 {
		holdoff = DefaultHoldoff
	}
	if maxDelay <= 0 {
		maxDelay = DefaultMaxDelay
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Debouncer{clock: clk, holdoff: holdoff, maxDelay: max(maxDelay, holdoff), nudge: make(chan struct{}, 1)}
}

// Trigger records a change. It never blocks.
func (d *Debouncer) Trigger() {
	d.mu.Lock()
	d.burst.add(d.clock.Now())
	d.mu.Unlock()
	select {
	case d.nudge <- struct{}{}:
	default:
	}
}

// Run calls fire once per burst of triggers until ctx ends. It triggers once at start, so the
// first call happens even when nothing changes. Call it once.
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

// next reports whether a burst is pending and how long until it is due. A due burst is
// consumed: its triggers are considered handled by the call about to happen.
func (d *Debouncer) next() (time.Duration, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.burst.pending {
		return 0, false
	}
	wait := d.burst.due(d.holdoff, d.maxDelay).Sub(d.clock.Now())
	if wait <= 0 {
		d.burst = burst{}
	}
	return wait, true
}

// sleep waits for wait or until ctx ends, and reports whether ctx is still live. Triggers do not
// interrupt it: they only move the due time later, and next measures again on waking.
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

// burst is the triggers not yet handled.
type burst struct {
	pending     bool
	first, last time.Time
}

func (b *burst) add(now time.Time) {
	if !b.pending {
		b.pending, b.first = true, now
	}
	b.last = now
}

// due is the holdoff after the last trigger, but no later than the maximum delay after the first.
func (b *burst) due(holdoff, maxDelay time.Duration) time.Time {
	due := b.last.Add(holdoff)
	if limit := b.first.Add(maxDelay); due.After(limit) {
		return limit
	}
	return due
}
