package agent

import "time"

// Backoff is a jittered exponential backoff: attempt n (from 0) waits Base·2ⁿ, capped at Max,
// stretched by up to Jitter of itself and capped at Max again.
type Backoff struct {
	Base   time.Duration
	Max    time.Duration
	Jitter float64
}

// DefaultBackoff waits 250 ms before the first retry, up to 30 s, with 20% jitter.
var DefaultBackoff = Backoff{Base: 250 * time.Millisecond, Max: 30 * time.Second, Jitter: 0.2}

// Delay returns the wait before retry number attempt (0 for the first), given r in [0, 1).
// It is always within [Base, Max].
func (b Backoff) Delay(attempt int, r float64) time.Duration {
	ceiling := b.Base
	for i := 0; i < attempt && ceiling < b.Max; i++ {
		ceiling *= 2
	}
	ceiling = min(ceiling, b.Max)
	d := ceiling + time.Duration(float64(ceiling)*b.Jitter*r)
	return max(b.Base, min(d, b.Max))
}

// retrier counts consecutive failures and waits the matching backoff.
type retrier struct {
	policy  Backoff
	rand    func() float64
	attempt int
}

// next returns the delay before the next attempt and counts it.
func (r *retrier) next() time.Duration {
	d := r.policy.Delay(r.attempt, r.rand())
	r.attempt++
	return d
}

// reset starts over from Base, after a success.
func (r *retrier) reset() { r.attempt = 0 }
