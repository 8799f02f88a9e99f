package bootstrap

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Tests that bootstraps beyond the concurrency bound queue, that a full queue refuses at once,
// and that a queued request gives up after the wait.
func TestBootstrapLimiter(t *testing.T) {
	t.Parallel()
	t.Run("bootstraps beyond the queue are refused as exhausted", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, func(c *Config) { c.MaxConcurrent, c.MaxQueued, c.QueueWait = 1, 1, time.Minute })
		e.auth.gate = make(chan struct{})
		results := make(chan error, 2)
		for range 2 {
			go func() {
				_, err := e.client.Bootstrap(t.Context(), request(t))
				results <- err
			}()
		}
		waitFor(t, "one running and one queued bootstrap", func() bool {
			return e.auth.calls.Load() == 1 && len(e.svc.limiter.queue) == 1
		})
		_, err := e.client.Bootstrap(t.Context(), request(t))
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("third bootstrap: %v, want ResourceExhausted", err)
		}
		close(e.auth.gate)
		for range 2 {
			if err := <-results; err != nil {
				t.Errorf("admitted bootstrap: %v", err)
			}
		}
		if got := testutil.ToFloat64(e.svc.metrics.total.WithLabelValues(resultRejected, string(ReasonOverloaded))); got != 1 {
			t.Errorf("rejected{Overloaded} = %v", got)
		}
	})
	t.Run("a queued bootstrap gives up after the wait", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, func(c *Config) { c.MaxConcurrent, c.MaxQueued, c.QueueWait = 1, 1, 50*time.Millisecond })
		e.auth.gate = make(chan struct{})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = e.client.Bootstrap(ctx, request(t))
		}()
		waitFor(t, "the first bootstrap to hold the slot", func() bool { return e.auth.calls.Load() == 1 })
		_, err := e.client.Bootstrap(t.Context(), request(t))
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("queued bootstrap: %v, want Unavailable", err)
		}
		cancel()
		<-done
		if got := e.reporter.all(); len(got) != 1 || got[0].Reason != ReasonQueueTimeout {
			t.Errorf("reports %+v, want one QueueTimeout", got)
		}
	})
}

// Tests that, once slot times are known, a request whose expected wait exceeds the queue wait is
// refused at once as Overloaded (RESOURCE_EXHAUSTED, retried after a backoff) while queue places
// are still free, instead of holding a place until it times out as Unavailable.
func TestLimiterRefusesAnExpectedTimeoutAtOnce(t *testing.T) {
	t.Parallel()
	const held = 100 * time.Millisecond
	l := newLimiter(1, 50, time.Second)
	release, err := l.acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(held)
	release()
	release() // a second call gives nothing back twice
	if len(l.slots) != 0 {
		t.Fatalf("%d slots held after release", len(l.slots))
	}

	hold, err := l.acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	queued := 0
	for {
		ahead := len(l.queue)
		start := time.Now()
		errc := make(chan error, 1)
		go func() {
			release, err := l.acquire(ctx)
			if err == nil {
				release()
			}
			errc <- err
		}()
		select {
		case err := <-errc:
			var rej *rejectError
			if !errors.As(err, &rej) || rej.reason != ReasonOverloaded {
				t.Fatalf("with %d queued: %v, want Overloaded", ahead, err)
			}
			if waited := time.Since(start); waited > l.wait/2 {
				t.Errorf("refused after %v, not at once", waited)
			}
			if queued == 0 || ahead >= cap(l.queue) {
				t.Fatalf("refused with %d queued of %d: the estimate did not decide", ahead, cap(l.queue))
			}
			// (ahead+1) x the slot time over one slot exceeds the 1 s wait: at least 10 queued
			// at a 100 ms slot time, fewer when the machine made the first slot slower.
			if ahead > int(l.wait/held) {
				t.Errorf("refused only with %d queued, want it by %d", ahead, l.wait/held)
			}
			hold()
			return
		case <-time.After(20 * time.Millisecond):
			queued++ // it waits in the queue
		}
		waitFor(t, "the request to queue", func() bool { return len(l.queue) == ahead+1 })
	}
}
