package upstream

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Errors of Endpoint.Acquire: the request is answered 503 without reaching the backend.
var (
	// ErrPendingOverflow refuses a request at once: the endpoint's connections are all busy
	// and MaxPendingPerEndpoint requests already wait for one.
	ErrPendingOverflow = errors.New("upstream: endpoint's pending requests at their limit")
	// ErrPendingTimeout refuses a request that waited PendingTimeout for a connection.
	ErrPendingTimeout = errors.New("upstream: no endpoint connection within the pending timeout")
	// ErrClientShare refuses a request at once: its client already holds or waits for its
	// share of the endpoint's connections.
	ErrClientShare = errors.New("upstream: client holds its share of the endpoint's connections")
)

// limiter admits the requests in flight to one endpoint, as Envoy's circuit breakers do: at
// most max at once (for HTTP/1.1 one connection each), at most maxPending waiting for a place,
// each for at most wait, and at most share held or waiting per client, so that one client
// cannot take every connection of an endpoint. Places are handed to waiters in arrival order.
type limiter struct {
	max, maxPending, share int
	wait                   time.Duration
	// pending counts the waiting requests of every endpoint of the pool.
	pending *atomic.Int64

	mu       sync.Mutex
	busy     int
	byClient map[string]int // places held or waited for, per client
	waiters  list.List      // of *waiter
}

type waiter struct {
	client  string
	ready   chan struct{}
	granted bool
}

func newLimiter(o *Options, pending *atomic.Int64) *limiter {
	share := max(1, o.MaxConnsPerEndpoint*o.ClientSharePercent/100)
	return &limiter{
		max: o.MaxConnsPerEndpoint, maxPending: o.MaxPendingPerEndpoint, share: share,
		wait: o.PendingTimeout, pending: pending, byClient: map[string]int{},
	}
}

// Slot is one admitted request's place; Release gives it back, once, however often it is
// called. The zero Slot releases nothing.
type Slot struct {
	l      *limiter
	client string
	once   *sync.Once
}

// Release gives the place back, to the first waiter if any.
func (s Slot) Release() {
	if s.l != nil {
		s.once.Do(func() { s.l.release(s.client) })
	}
}

// acquire takes a place for client, waiting in line when every place is busy.
func (l *limiter) acquire(ctx context.Context, client string) (Slot, error) {
	l.mu.Lock()
	if l.byClient[client] >= l.share {
		l.mu.Unlock()
		return Slot{}, ErrClientShare
	}
	if l.busy < l.max && l.waiters.Len() == 0 {
		l.busy++
		l.byClient[client]++
		l.mu.Unlock()
		return l.slot(client), nil
	}
	if l.waiters.Len() >= l.maxPending {
		l.mu.Unlock()
		return Slot{}, ErrPendingOverflow
	}
	w := &waiter{client: client, ready: make(chan struct{})}
	e := l.waiters.PushBack(w)
	l.byClient[client]++
	l.pending.Add(1)
	l.mu.Unlock()
	defer l.pending.Add(-1)
	return l.await(ctx, w, e)
}

// tryAcquire takes a place only when one is free at once, for work that may be dropped.
func (l *limiter) tryAcquire(client string) (Slot, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.busy >= l.max || l.waiters.Len() > 0 || l.byClient[client] >= l.share {
		return Slot{}, false
	}
	l.busy++
	l.byClient[client]++
	return l.slot(client), true
}

func (l *limiter) await(ctx context.Context, w *waiter, e *list.Element) (Slot, error) {
	timer := time.NewTimer(l.wait)
	defer timer.Stop()
	var err error
	select {
	case <-w.ready:
		return l.slot(w.client), nil
	case <-timer.C:
		err = ErrPendingTimeout
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.granted { // handed a place as the wait ended: keep it
		return l.slot(w.client), nil
	}
	l.waiters.Remove(e)
	l.forget(w.client)
	return Slot{}, err
}

func (l *limiter) slot(client string) Slot { return Slot{l: l, client: client, once: &sync.Once{}} }

func (l *limiter) release(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forget(client)
	if e := l.waiters.Front(); e != nil {
		w := l.waiters.Remove(e).(*waiter)
		w.granted = true
		close(w.ready)
		return
	}
	l.busy--
}

func (l *limiter) forget(client string) {
	if l.byClient[client]--; l.byClient[client] <= 0 {
		delete(l.byClient, client)
	}
}

// Acquire admits one request of client (the downstream client's address) to the endpoint; it
// waits at most PendingTimeout for a place and fails with ErrPendingOverflow,
// ErrPendingTimeout, ErrClientShare or the context's cause. The slot is released once the
// exchange no longer holds its connection.
func (ep *Endpoint) Acquire(ctx context.Context, client string) (Slot, error) {
	return ep.limit.acquire(ctx, client)
}

// TryAcquire admits one request of client only when a place is free at once (mirrors).
func (ep *Endpoint) TryAcquire(client string) (Slot, bool) { return ep.limit.tryAcquire(client) }
