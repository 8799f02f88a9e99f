// Package quiet decides which refusals of the discovery listeners are logged and reported: a
// token bucket per key, so a flood of one refusal neither floods the log nor hides another.
package quiet

import (
	"sync"
	"time"
)

// Defaults of the limiter.
const (
	// DefaultBurst refusals of one key are logged and reported at once; after that one more
	// every DefaultInterval.
	DefaultBurst    = 3
	DefaultInterval = 10 * time.Second
	// maxKeys bounds the memory of the limiter.
	maxKeys = 1024
)

// Limiter is a token bucket per key, such as (reason, principal). Metrics should count every
// refusal regardless. It is safe for concurrent use.
type Limiter struct {
	burst    float64
	interval time.Duration

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens     float64
	last       time.Time
	suppressed int
}

// New returns a Limiter letting burst events of a key through at once and one more per interval.
func New(burst int, interval time.Duration) *Limiter {
	return &Limiter{burst: float64(burst), interval: interval, buckets: map[string]*bucket{}}
}

// Allow reports whether this event of key is logged and reported, and how many of its key were
// suppressed since the last one that was.
func (q *Limiter) Allow(key string, now time.Time) (bool, int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := key
	b := q.buckets[k]
	if b == nil {
		if len(q.buckets) >= maxKeys {
			q.sweep(now)
		}
		b = &bucket{tokens: q.burst, last: now}
		q.buckets[k] = b
	}
	b.tokens = min(q.burst, b.tokens+float64(now.Sub(b.last))/float64(q.interval))
	b.last = now
	if b.tokens < 1 {
		b.suppressed++
		return false, 0
	}
	b.tokens--
	n := b.suppressed
	b.suppressed = 0
	return true, n
}

// sweep forgets the buckets that are full again, and all of them if that is not enough.
func (q *Limiter) sweep(now time.Time) {
	for k, b := range q.buckets {
		if b.tokens+float64(now.Sub(b.last))/float64(q.interval) >= q.burst {
			delete(q.buckets, k)
		}
	}
	if len(q.buckets) >= maxKeys {
		clear(q.buckets)
	}
}
