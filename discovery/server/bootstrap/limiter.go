package bootstrap

import (
	"context"
	"time"
)

// limiter bounds the bootstraps in progress, each of which costs a TokenReview: up to cap(slots)
// run at once and up to cap(queue) more wait at most wait for a slot. Requests beyond are refused
// at once with ReasonOverloaded, and a wait that runs out gives ReasonQueueTimeout.
type limiter struct {
	slots chan struct{}
	queue chan struct{}
	wait  time.Duration
}

func newLimiter(concurrent, queued int, wait time.Duration) *limiter {
	return &limiter{
		slots: make(chan struct{}, concurrent),
		queue: make(chan struct{}, queued),
		wait:  wait,
	}
}

// acquire takes a slot; on success the caller must call release.
func (l *limiter) acquire(ctx context.Context) error {
	select {
	case l.slots <- struct{}{}:
		return nil
	default:
	}
	select {
	case l.queue <- struct{}{}:
	default:
		return reject(ReasonOverloaded, "too many bootstraps in progress", nil)
	}
	defer func() { <-l.queue }()
	timer := time.NewTimer(l.wait)
	defer timer.Stop()
	select {
	case l.slots <- struct{}{}:
		return nil
	case <-timer.C:
		return reject(ReasonQueueTimeout, "timed out waiting for a bootstrap slot", nil)
	case <-ctx.Done():
		return reject(ReasonCanceled, "request canceled", ctx.Err())
	}
}

func (l *limiter) release() { <-l.slots }
