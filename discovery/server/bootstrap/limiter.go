package bootstrap

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// limiter bounds the bootstraps in progress, each of which costs a TokenReview: up to cap(slots)
// run at once and up to cap(queue) more wait at most wait for a slot. Requests beyond are refused
// at once with ReasonOverloaded, and a wait that runs out gives ReasonQueueTimeout.
//
// A request that would queue is also refused at once with ReasonOverloaded when the wait it can
// expect (the requests queued ahead of it and itself, served cap(slots) at a time at the recent
// mean time a slot is held) exceeds wait: it would most likely time out after holding a queue
// place for the whole wait, where a refusal now lets it retry after a backoff
// (RESOURCE_EXHAUSTED). The wait stays the bound when the estimate is wrong, as when the API
// server stalls all at once.
type limiter struct {
	slots chan struct{}
	queue chan struct{}
	wait  time.Duration

	mu sync.Mutex
	// held is the moving average of how long a slot is held, zero until one is given back.
	held time.Duration
}

// heldWeight is the weight of the newest slot time in the moving average (1/8, as TCP's SRTT):
// a few dozen bootstraps make the estimate follow a change in the API server's latency.
const heldWeight = 8

func newLimiter(concurrent, queued int, wait time.Duration) *limiter {
	return &limiter{
		slots: make(chan struct{}, concurrent),
		queue: make(chan struct{}, queued),
		wait:  wait,
	}
}

// acquire takes a slot; on success the caller must call the release it returns.
func (l *limiter) acquire(ctx context.Context) (func(), error) {
	select {
	case l.slots <- struct{}{}:
		return l.releaser(), nil
	default:
	}
	if expected := l.expectedWait(len(l.queue)); expected > l.wait {
		return nil, reject(ReasonOverloaded, "too many bootstraps in progress",
			fmt.Errorf("a slot is expected in %v, beyond the queue wait of %v", expected.Round(time.Millisecond), l.wait))
	}
	select {
	case l.queue <- struct{}{}:
	default:
		return nil, reject(ReasonOverloaded, "too many bootstraps in progress", nil)
	}
	defer func() { <-l.queue }()
	timer := time.NewTimer(l.wait)
	defer timer.Stop()
	select {
	case l.slots <- struct{}{}:
		return l.releaser(), nil
	case <-timer.C:
		return nil, reject(ReasonQueueTimeout, "timed out waiting for a bootstrap slot", nil)
	case <-ctx.Done():
		return nil, reject(ReasonCanceled, "request canceled", ctx.Err())
	}
}

// expectedWait is how long a request with ahead others queued before it can expect to wait for
// a slot; zero while no slot time is known.
func (l *limiter) expectedWait(ahead int) time.Duration {
	l.mu.Lock()
	held := l.held
	l.mu.Unlock()
	return time.Duration(ahead+1) * held / time.Duration(cap(l.slots))
}

// releaser returns the function that gives the slot taken now back, once, and records how long
// it was held.
func (l *limiter) releaser() func() {
	start := time.Now()
	var once sync.Once
	return func() {
		once.Do(func() {
			l.observe(time.Since(start))
			<-l.slots
		})
	}
}

func (l *limiter) observe(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held == 0 {
		l.held = d
		return
	}
	l.held += (d - l.held) / heldWeight
}
