package clock_test

import (
	"testing"
	"time"

	"coxswain.dev/coxswain/proxy/internal/clock"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func fired(t clock.Timer) bool {
	select {
	case <-t.C():
		return true
	default:
		return false
	}
}

func TestFakeFiresTimersOnlyWhenAdvancedPastTheirDeadline(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	short, long := clk.NewTimer(time.Second), clk.NewTimer(time.Minute)
	if clk.Pending() != 2 {
		t.Fatalf("%d pending timers, want 2", clk.Pending())
	}
	if next, ok := clk.NextDeadline(); !ok || next != time.Second {
		t.Fatalf("next deadline %s %v", next, ok)
	}
	clk.Advance(999 * time.Millisecond)
	if fired(short) || fired(long) {
		t.Fatal("a timer fired early")
	}
	clk.Advance(time.Millisecond)
	if !fired(short) || fired(long) {
		t.Fatal("the one-second timer did not fire alone at one second")
	}
	if !clk.Now().Equal(epoch.Add(time.Second)) {
		t.Fatalf("now %s", clk.Now())
	}
	if !long.Stop() || long.Stop() {
		t.Fatal("Stop must report a pending timer once")
	}
	clk.Advance(time.Hour)
	if fired(long) || clk.Pending() != 0 {
		t.Fatal("a stopped timer fired")
	}
	if _, ok := clk.NextDeadline(); ok {
		t.Fatal("a deadline without timers")
	}
}

func TestFakeFiresNonPositiveTimersAtOnce(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	if !fired(clk.NewTimer(0)) || !fired(clk.NewTimer(-time.Second)) || clk.Pending() != 0 {
		t.Fatal("a timer of no duration did not fire at once")
	}
}

func TestRealClock(t *testing.T) {
	t.Parallel()
	clk := clock.Real()
	timer := clk.NewTimer(time.Millisecond)
	select {
	case <-timer.C():
	case <-time.After(10 * time.Second):
		t.Fatal("the real timer never fired")
	}
	if timer.Stop() {
		t.Fatal("a fired timer reported pending")
	}
	if clk.Now().IsZero() {
		t.Fatal("zero time")
	}
}
