package rebuild

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/state"
	"coxswain.dev/coxswain/internal/status"
)

// Backoff of a status write that failed: it is tried again after this long, doubling up to the
// maximum, unless a newer graph arrives meanwhile.
const (
	statusRetryFirst = 100 * time.Millisecond
	statusRetryMax   = 10 * time.Second
)

// statusAgainInterval is the least time between the end of a status pass and a pass that judges
// again the scopes whose proxies answered: answers (and streams opening and closing) that come
// meanwhile coalesce into that one pass, so a proxy that churns its streams thousands of times
// a second costs ten passes a second at most, each over the scopes that changed only.
const statusAgainInterval = 100 * time.Millisecond

// AppliedStatusWriter is a StatusWriter that can also write only what the proxies' answers in
// some scopes decide (status.Writer is one); the status loop judges those scopes with it when
// only answers changed. With a StatusWriter that is not one, it writes the whole graph again.
type AppliedStatusWriter interface {
	StatusWriter
	WriteApplied(ctx context.Context, cs *state.ClusterState, g *graph.Graph, scopes []cache.Scope) (int, error)
}

var _ AppliedStatusWriter = (*status.Writer)(nil)

// statusLoop writes, on a goroutine of its own, the status of the latest graph it was offered.
// A rebuild then publishes its snapshots and returns without waiting for one API call per
// changed object: with thousands of routes, status writes would otherwise hold every following
// rebuild, and so every route change, behind them. Graphs offered while a write runs replace
// each other; only the latest is written next, so status never goes back to an older state.
// Between graphs, the scopes whose proxies answered are judged again on the latest graph, at
// most once every statusAgainInterval.
type statusLoop struct {
	w    StatusWriter
	wake chan struct{}

	mu   sync.Mutex
	next *statusJob
	// last is the job taken last, whose graph the answered scopes are judged on.
	last *statusJob
	// answered are the scopes whose proxies answered since the last pass.
	answered map[cache.Scope]bool
	// passEnded is when the latest pass ended.
	passEnded time.Time
	busy      bool
	written   int
}

type statusJob struct {
	cs *state.ClusterState
	g  *graph.Graph
}

func newStatusLoop(w StatusWriter) *statusLoop {
	return &statusLoop{w: w, wake: make(chan struct{}, 1), answered: map[cache.Scope]bool{}}
}

// offer makes g the next status to write.
func (l *statusLoop) offer(cs *state.ClusterState, g *graph.Graph) {
	l.mu.Lock()
	l.next = &statusJob{cs: cs, g: g}
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// take returns the job to write, nil when there is none, and marks the loop busy with it.
func (l *statusLoop) take() *statusJob {
	l.mu.Lock()
	defer l.mu.Unlock()
	job := l.next
	l.next, l.busy = nil, job != nil
	if job != nil {
		l.last = job
	}
	return job
}

// again judges scope once more on the latest graph, unless a newer graph waits already (its
// write judges every scope): what the status is computed from besides the graph (the proxies'
// acknowledgements) changed there. Calls coalesce, into one pass per statusAgainInterval.
func (l *statusLoop) again(scope cache.Scope) {
	l.mu.Lock()
	wake := l.next == nil && l.last != nil
	if wake {
		l.answered[scope] = true
	}
	l.mu.Unlock()
	if wake {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// takeAnswered returns the scopes to judge again, sorted, and the job of the graph to judge them
// on, and marks the loop busy, once statusAgainInterval has passed since the latest pass ended;
// otherwise it returns how long to wait, zero when there is nothing to judge.
func (l *statusLoop) takeAnswered(now time.Time) (scopes []cache.Scope, job *statusJob, wait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.answered) == 0 || l.next != nil || l.last == nil {
		return nil, nil, 0
	}
	if wait := l.passEnded.Add(statusAgainInterval).Sub(now); wait > 0 {
		return nil, nil, wait
	}
	scopes = slices.SortedFunc(maps.Keys(l.answered), func(a, b cache.Scope) int { return strings.Compare(a.String(), b.String()) })
	clear(l.answered)
	l.busy = true
	return scopes, l.last, 0
}

// done ends a write of job: its count is added, and a failed job is put back unless a newer one
// arrived meanwhile.
func (l *statusLoop) done(job *statusJob, written int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended(written, err) {
		l.next = job
	}
}

// doneAnswered ends a pass over scopes: its count is added, and the scopes of a failed one are
// judged again with the next.
func (l *statusLoop) doneAnswered(scopes []cache.Scope, written int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended(written, err) {
		for _, s := range scopes {
			l.answered[s] = true
		}
	}
}

// ended records the end of a pass, under l.mu, and says whether what it wrote must be written
// again: it failed, and no newer graph arrived meanwhile.
func (l *statusLoop) ended(written int, err error) bool {
	l.busy = false
	l.written += written
	l.passEnded = time.Now()
	return err != nil && l.next == nil
}

// idle reports whether every graph offered and every answer heard so far has been written (or
// failed and waits).
func (l *statusLoop) idle() (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next == nil && len(l.answered) == 0 && !l.busy, l.written
}

// run writes offered graphs, and judges again the scopes whose proxies answered, until ctx
// ends.
func (l *statusLoop) run(ctx context.Context) {
	logger := log.FromContext(ctx)
	retry := statusRetryFirst
	for {
		wait := time.Duration(-1) // nothing to do: wait for a wake
		n, err := 0, error(nil)
		if job := l.take(); job != nil {
			n, err = l.w.Write(ctx, job.cs, job.g)
			l.done(job, n, err)
			wait = 0
		} else if scopes, job, w := l.takeAnswered(time.Now()); job != nil {
			n, err = l.writeAnswered(ctx, job, scopes)
			l.doneAnswered(scopes, n, err)
			wait = 0
		} else if w > 0 {
			wait = w
		}
		if n > 0 {
			logger.Info("Wrote status", "objects", n)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			logger.Error(err, "Failed to write status; trying again", "after", retry)
			if !sleep(ctx, retry) {
				return
			}
			retry = min(2*retry, statusRetryMax)
			continue
		}
		if wait == 0 {
			retry = statusRetryFirst
			continue // wrote something: look again
		}
		if !l.sleepUntilWoken(ctx, wait) {
			return
		}
	}
}

// writeAnswered judges scopes again on job's graph, with the whole graph when the writer cannot
// judge scopes alone.
func (l *statusLoop) writeAnswered(ctx context.Context, job *statusJob, scopes []cache.Scope) (int, error) {
	if w, ok := l.w.(AppliedStatusWriter); ok {
		return w.WriteApplied(ctx, job.cs, job.g, scopes)
	}
	return l.w.Write(ctx, job.cs, job.g)
}

// sleepUntilWoken waits for a wake, and for at most wait when it is positive; false when ctx
// ended.
func (l *statusLoop) sleepUntilWoken(ctx context.Context, wait time.Duration) bool {
	var timer <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-ctx.Done():
		return false
	case <-l.wake:
	case <-timer:
	}
	return true
}

// sleep waits for d; false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
