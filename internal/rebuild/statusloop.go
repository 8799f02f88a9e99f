package rebuild

import (
	"context"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/state"
)

// Backoff of a status write that failed: it is tried again after this long, doubling up to the
// maximum, unless a newer graph arrives meanwhile.
const (
	statusRetryFirst = 100 * time.Millisecond
	statusRetryMax   = 10 * time.Second
)

// statusLoop writes, on a goroutine of its own, the status of the latest graph it was offered.
// A rebuild then publishes its snapshots and returns without waiting for one API call per
// changed object: with thousands of routes, status writes would otherwise hold every following
// rebuild, and so every route change, behind them. Graphs offered while a write runs replace
// each other; only the latest is written next, so status never goes back to an older state.
type statusLoop struct {
	w    StatusWriter
	wake chan struct{}

	mu   sync.Mutex
	next *statusJob
	// last is the job taken last, which again offers once more.
	last    *statusJob
	busy    bool
	written int
}

type statusJob struct {
	cs *state.ClusterState
	g  *graph.Graph
}

func newStatusLoop(w StatusWriter) *statusLoop {
	return &statusLoop{w: w, wake: make(chan struct{}, 1)}
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

// again writes the latest graph once more, unless a newer one waits already: what the status
// is computed from besides the graph (the proxies' acknowledgements) changed. Calls coalesce.
func (l *statusLoop) again() {
	l.mu.Lock()
	if l.next == nil {
		l.next = l.last
	}
	wake := l.next != nil
	l.mu.Unlock()
	if wake {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// done ends a write of job: its count is added, and a failed job is put back unless a newer one
// arrived meanwhile.
func (l *statusLoop) done(job *statusJob, written int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.busy = false
	l.written += written
	if err != nil && l.next == nil {
		l.next = job
	}
}

// idle reports whether every graph offered so far has been written (or failed and waits).
func (l *statusLoop) idle() (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next == nil && !l.busy, l.written
}

// run writes offered graphs until ctx ends.
func (l *statusLoop) run(ctx context.Context) {
	logger := log.FromContext(ctx)
	retry := statusRetryFirst
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.wake:
		}
		for job := l.take(); job != nil; job = l.take() {
			n, err := l.w.Write(ctx, job.cs, job.g)
			l.done(job, n, err)
			if n > 0 {
				logger.Info("Wrote status", "objects", n)
			}
			if err == nil {
				retry = statusRetryFirst
				continue
			}
			if ctx.Err() != nil {
				return
			}
			logger.Error(err, "Failed to write status; trying again", "after", retry)
			select {
			case <-ctx.Done():
				return
			case <-time.After(retry):
			}
			retry = min(2*retry, statusRetryMax)
		}
	}
}
