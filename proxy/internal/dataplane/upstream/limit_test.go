package upstream

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func testLimiter(maxConns, maxPending, sharePercent int, wait time.Duration) *limiter {
	o := Options{MaxConnsPerEndpoint: maxConns, MaxPendingPerEndpoint: maxPending, ClientSharePercent: sharePercent, PendingTimeout: wait}
	return newLimiter(&o, &atomic.Int64{})
}

// Tests that the limiter hands a released place to the first waiter, refuses a waiter beyond
// the pending cap and a client beyond its share at once, ends a wait at the timeout, and that
// a slot released twice gives its place back once.
func TestLimiter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := testLimiter(2, 1, 100, time.Minute)
	a, err := l.acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.acquire(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := l.acquire(ctx, "c")
		got <- err
	}()
	for l.pending.Load() != 1 {
		time.Sleep(time.Millisecond)
	}
	if _, err := l.acquire(ctx, "d"); !errors.Is(err, ErrPendingOverflow) {
		t.Errorf("a request beyond the pending cap: %v, want ErrPendingOverflow", err)
	}
	a.Release()
	a.Release()
	if err := <-got; err != nil {
		t.Errorf("the waiter got %v, want the released place", err)
	}
	if func() int { l.mu.Lock(); defer l.mu.Unlock(); return l.busy }() != 2 {
		t.Errorf("busy %d after a double release and a hand-over, want 2", l.busy)
	}

	short := testLimiter(1, 1, 100, 20*time.Millisecond)
	if _, err := short.acquire(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := short.acquire(ctx, "b"); !errors.Is(err, ErrPendingTimeout) {
		t.Errorf("a wait past the timeout: %v, want ErrPendingTimeout", err)
	}
	if _, ok := short.tryAcquire("c"); ok {
		t.Error("tryAcquire took a place on a full endpoint")
	}

	shared := testLimiter(4, 4, 50, time.Minute)
	for range 2 {
		if _, err := shared.acquire(ctx, "a"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := shared.acquire(ctx, "a"); !errors.Is(err, ErrClientShare) {
		t.Errorf("a third place for one client of a 4-place endpoint at 50%%: %v, want ErrClientShare", err)
	}
	if _, err := shared.acquire(ctx, "b"); err != nil {
		t.Errorf("another client: %v", err)
	}
}
