package rebuild

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestBurstDue(t *testing.T) {
	t.Parallel()
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	tests := []struct {
		name     string
		triggers []int // milliseconds after t0
		want     int
	}{
		{"a single trigger is due one holdoff later", []int{0}, 100},
		{"triggers closer than the holdoff coalesce and push the due time", []int{0, 50, 90}, 190},
		{"a steady stream is due at the maximum delay after its first trigger", []int{0, 80, 160, 240, 320, 400, 480, 560, 640, 720, 800, 880, 960}, 1000},
		{"a late trigger cannot push past the maximum delay", []int{0, 950}, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var b burst
			for _, at := range tt.triggers {
				b.add(t0.Add(ms(at)))
			}
			if got, want := b.due(ms(100), time.Second), t0.Add(ms(tt.want)); !got.Equal(want) {
				t.Errorf("due %v after t0, want %v", got.Sub(t0), want.Sub(t0))
			}
		})
	}
}

func TestNewDebouncerDefaults(t *testing.T) {
	t.Parallel()
	d := NewDebouncer(0, 0, nil)
	if d.holdoff != DefaultHoldoff || d.maxDelay != DefaultMaxDelay {
		t.Errorf("holdoff %v, maxDelay %v; want the defaults", d.holdoff, d.maxDelay)
	}
	if d := NewDebouncer(time.Second, time.Millisecond, nil); d.maxDelay != time.Second {
		t.Errorf("maxDelay %v below the holdoff was not raised to it", d.maxDelay)
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
	h.d = NewDebouncer(100*time.Millisecond, time.Second, h.clock)
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

func TestDebouncerWaitsForTheHoldoff(t *testing.T) {
	t.Parallel()
	h := startHarness(t) // Run triggers once at start
	h.armed()
	h.step(99 * time.Millisecond)
	h.noCall()
	h.clock.Step(time.Millisecond)
	if at := h.call(); at != 100*time.Millisecond {
		t.Fatalf("called at t0+%v, want t0+100ms", at)
	}
}

func TestDebouncerCoalescesABurst(t *testing.T) {
	t.Parallel()
	h := startHarness(t)
	h.armed()
	for range 3 {
		h.d.Trigger()
		h.step(50 * time.Millisecond)
	}
	h.noCall()
	h.clock.Step(50 * time.Millisecond)
	if at := h.call(); at != 200*time.Millisecond {
		t.Fatalf("called at t0+%v, want t0+200ms", at)
	}
	h.noCall()
	if h.clock.Waiters() != 0 {
		t.Fatal("the debouncer armed a timer with nothing pending")
	}
}

func TestDebouncerFiresAtTheMaximumDelay(t *testing.T) {
	t.Parallel()
	h := startHarness(t)
	h.armed()
	for range 19 {
		h.step(50 * time.Millisecond)
		h.d.Trigger()
	}
	h.noCall()
	h.clock.Step(50 * time.Millisecond)
	if at := h.call(); at != time.Second {
		t.Fatalf("called at t0+%v, want t0+1s", at)
	}
}

func TestDebouncerStartsANewBurstAfterFiring(t *testing.T) {
	t.Parallel()
	h := startHarness(t)
	h.armed()
	h.clock.Step(100 * time.Millisecond)
	h.call()
	h.d.Trigger()
	h.armed()
	h.clock.Step(100 * time.Millisecond)
	if at := h.call(); at != 200*time.Millisecond {
		t.Fatalf("second call at t0+%v, want t0+200ms", at)
	}
}
