package clock

import (
	"sync"
	"time"
)

// Fake is a Clock that moves only when told to. It is safe for concurrent use.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*fakeTimer]struct{}
}

// NewFake returns a Fake clock reading now.
func NewFake(now time.Time) *Fake {
	return &Fake{now: now, timers: make(map[*fakeTimer]struct{})}
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer that fires when the clock has advanced by d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{clock: f, deadline: f.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- f.now
		return t
	}
	f.timers[t] = struct{}{}
	return t
}

// Advance moves the clock forward by d and fires every timer whose deadline has come.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	for t := range f.timers {
		if !t.deadline.After(f.now) {
			delete(f.timers, t)
			t.c <- f.now
		}
	}
}

// Pending returns the number of timers that have not fired or been stopped, so that a test can
// wait for a goroutine to start waiting before it advances the clock.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// NextDeadline returns how far ahead the earliest pending timer is, and false when none is.
func (f *Fake) NextDeadline() (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var next time.Time
	for t := range f.timers {
		if next.IsZero() || t.deadline.Before(next) {
			next = t.deadline
		}
	}
	return next.Sub(f.now), !next.IsZero()
}

type fakeTimer struct {
	clock    *Fake
	deadline time.Time
	c        chan time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	_, pending := t.clock.timers[t]
	delete(t.clock.timers, t)
	return pending
}
