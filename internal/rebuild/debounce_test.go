package rebuild

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestNewDebouncerDefaults(t *testing.T) {
	t.Parallel()
	if d := NewDebouncer(0, nil); d.interval != DefaultInterval {
		t.Errorf("interval %v; want the default", d.interval)
	}
}

// harness runs a Debouncer on a fake clock and records the clock at every call.
type harness struct {
	t     *testing.T
	clock *clocktesting.FakeClock
	d     *Debouncer
	calls chan time.Time
}

func startHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{t: t, clock: clocktesting.NewFakeClock(t0), calls: make(chan time.Time, 16)}
	h.d = NewDebouncer(100*time.Millisecond, h.clock)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.d.Run(ctx, func() { h.calls <- h.clock.Now() })
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return h
}

// armed waits until the loop sleeps on its timer: from then on only a clock step moves it.
func (h *harness) armed() {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for h.clock.Waiters() != 1 {
		if time.Now().After(deadline) {
			h.t.Fatal("the debouncer never armed its timer")
		}
		time.Sleep(time.Millisecond)
	}
}

// step advances the clock and waits until the loop is asleep again.
func (h *harness) step(d time.Duration) {
	h.t.Helper()
	h.clock.Step(d)
	h.armed()
}

func (h *harness) noCall() {
	h.t.Helper()
	select {
	case at := <-h.calls:
		h.t.Fatalf("unexpected call at t0+%v", at.Sub(t0))
	default:
	}
}

func (h *harness) call() time.Duration {
	h.t.Helper()
	select {
	case at := <-h.calls:
		return at.Sub(t0)
	case <-time.After(5 * time.Second):
		h.t.Fatal("no call")
		return 0
	}
}

// idle waits until the loop waits for a trigger, with no timer armed.
func (h *harness) idle() {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(h.d.nudge) != 0 || h.clock.Waiters() != 0 || h.d.isPending() {
		if time.Now().After(deadline) {
			h.t.Fatal("the debouncer never went idle")
		}
		time.Sleep(time.Millisecond)
	}
}

func (d *Debouncer) isPending() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pending
}

func TestDebouncerCallsAtOnceWhenIdle(t *testing.T) {
	t.Parallel()
	h := startHarness(t) // Run triggers once at start
	if at := h.call(); at != 0 {
		t.Fatalf("first call at t0+%v, want at once", at)
	}
	h.idle()
	h.clock.Step(time.Second)
	h.d.Trigger()
	if at := h.call(); at != time.Second {
		t.Fatalf("call after an idle second at t0+%v, want at once (t0+1s)", at)
	}
}

func TestDebouncerCoalescesTriggersWithinTheInterval(t *testing.T) {
	t.Parallel()
	h := startHarness(t)
	h.call()
	h.idle()
	for range 3 {
		h.d.Trigger()
		h.step(20 * time.Millisecond)
	}
	h.noCall()
	h.clock.Step(40 * time.Millisecond)
	if at := h.call(); at != 100*time.Millisecond {
		t.Fatalf("called at t0+%v, want t0+100ms, one interval after the first call", at)
	}
	h.idle()
	h.noCall()
}

func TestDebouncerBoundsASteadyStream(t *testing.T) {
	t.Parallel()
	h := startHarness(t)
	h.call()
	h.idle()
	for i := 1; i <= 30; i++ {
		h.d.Trigger()
		h.armed()
		h.clock.Step(10 * time.Millisecond)
		if i%10 != 0 {
			continue
		}
		want := time.Duration(i) * 10 * time.Millisecond
		if at := h.call(); at != want {
			t.Fatalf("call at t0+%v, want t0+%v: one per interval", at, want)
		}
	}
	h.noCall()
}

// Tests that costly calls in quick succession are called at once while the work budget lasts
// (costBurst beyond twice their work), then spaced by twice their reported work, so a steady
// stream never keeps a core more than half busy; and that idle time gives the budget back.
func TestDebouncerSpendsItsBudgetThenSpacesCallsByTwiceTheirCost(t *testing.T) {
	t.Parallel()
	const cost = 300 * time.Millisecond
	h := startHarness(t) // interval 100 ms
	h.call()
	h.idle()
	h.d.Cost(cost) // budget spent: 600 ms
	for i := 1; i <= 2; i++ {
		h.clock.Step(100 * time.Millisecond)
		h.d.Trigger()
		if at, want := h.call(), time.Duration(i)*100*time.Millisecond; at != want {
			t.Fatalf("call %d at t0+%v, want at once (t0+%v): the budget is not spent", i, at, want)
		}
		h.idle()
		h.d.Cost(cost) // spent: 1100 ms, then 1600 ms
	}
	h.clock.Step(100 * time.Millisecond) // t0+300ms, 1500 ms spent: 500 ms beyond costBurst
	h.d.Trigger()
	h.armed()
	h.step(499 * time.Millisecond)
	h.noCall()
	h.clock.Step(time.Millisecond)
	if at := h.call(); at != 800*time.Millisecond {
		t.Fatalf("called at t0+%v, want t0+800ms, once the budget is back within costBurst", at)
	}
	h.idle()
	h.d.Cost(cost)
	h.d.Trigger()
	h.armed()
	h.step(599 * time.Millisecond)
	h.noCall()
	h.clock.Step(time.Millisecond)
	if at := h.call(); at != 1400*time.Millisecond {
		t.Fatalf("called at t0+%v, want t0+1400ms: a steady stream is spaced by twice the cost", at)
	}
	h.idle()
	h.d.Cost(cost)
	h.clock.Step(2 * time.Second)
	h.d.Trigger()
	if at := h.call(); at != 3400*time.Millisecond {
		t.Fatalf("called at t0+%v, want at once after an idle 2 s (t0+3400ms)", at)
	}
}
