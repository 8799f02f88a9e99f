package bootstrap

import (
	"sync"
	"time"
)

// Defaults of the refusal log and report limiter.
const (
	// DefaultReportBurst refusals of one (reason, principal) are logged and reported at once;
	// after that one more every DefaultReportInterval.
	DefaultReportBurst    = 3
	DefaultReportInterval = 10 * time.Second
	// maxReportKeys bounds the memory of the limiter.
	maxReportKeys = 1024
)

// quiet decides which refusals are logged and reported: a token bucket per (reason,
// principal), so a flood of one kind of refusal neither floods the log and the API server's
// events nor hides the refusals of another kind. Metrics count every refusal regardless.
type quiet struct {
	burst    float64
	interval time.Duration

	mu      sync.Mutex
	buckets map[quietKey]*bucket
}

type quietKey struct {
	reason    Reason
	principal string
}

type bucket struct {
	tokens     float64
	last       time.Time
	suppressed int
}

func newQuiet(burst int, interval time.Duration) *quiet {
	return &quiet{burst: float64(burst), interval: interval, buckets: map[quietKey]*bucket{}}
}

// allow reports whether this refusal is logged and reported, and how many of its key were
// suppressed since the last one that was.
func (q *quiet) allow(reason Reason, principal string, now time.Time) (bool, int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := quietKey{reason: reason, principal: principal}
	b := q.buckets[k]
	if b == nil {
		if len(q.buckets) >= maxReportKeys {
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
func (q *quiet) sweep(now time.Time) {
	for k, b := range q.buckets {
		if b.tokens+float64(now.Sub(b.last))/float64(q.interval) >= q.burst {
			delete(q.buckets, k)
		}
	}
	if len(q.buckets) >= maxReportKeys {
		clear(q.buckets)
	}
}
