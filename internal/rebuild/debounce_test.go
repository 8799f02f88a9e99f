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

// Tests that work reported longer than half the interval spaces calls by twice that work, so
// calls never keep a core more than half busy; and that a cheap call brings the interval back.
func TestDebouncerSpacesCallsByTwiceTheirCost(t *testing.T) {
	t.Parallel()
	h := startHarness(t)
	h.call()
	h.idle()
	h.d.Cost(80 * time.Millisecond)
	h.d.Trigger()
	h.armed()
	h.clock.Step(100 * time.Millisecond)
	h.armed()
	h.noCall()
	h.clock.Step(60 * time.Millisecond)
	if at := h.call(); at != 160*time.Millisecond {
		t.Fatalf("called at t0+%v, want t0+160ms, twice the reported cost after the first call", at)
	}
	h.idle()
	h.d.Cost(time.Millisecond)
	h.d.Trigger()
	h.armed()
	h.clock.Step(100 * time.Millisecond)
	if at := h.call(); at != 260*time.Millisecond {
		t.Fatalf("called at t0+%v, want t0+260ms, one interval after the previous call", at)
	}
}
