package rebuild

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/state"
)

// gatedWriter records the graphs it writes; each write waits for a value on gate, and fails
// while fail is set.
type gatedWriter struct {
	gate chan struct{}
	mu   sync.Mutex
	got  []*graph.Graph
	fail bool
}

func (w *gatedWriter) Write(ctx context.Context, _ *state.ClusterState, g *graph.Graph) (int, error) {
	select {
	case <-w.gate:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, g)
	if w.fail {
		return 0, errors.New("the API server said no")
	}
	return 1, nil
}

func (w *gatedWriter) written() []*graph.Graph {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*graph.Graph(nil), w.got...)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: still not true after 10s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Tests that graphs offered while a write runs replace each other, so the next write is of the
// latest and the status never goes back to an older state.
func TestStatusLoopWritesOnlyTheLatestGraph(t *testing.T) {
	t.Parallel()
	w := &gatedWriter{gate: make(chan struct{})}
	l := newStatusLoop(w)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.run(ctx)
	first, second, third := &graph.Graph{}, &graph.Graph{}, &graph.Graph{}
	l.offer(nil, first)
	waitFor(t, "the first write starts", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.busy && l.next == nil
	})
	l.offer(nil, second)
	l.offer(nil, third)
	w.gate <- struct{}{} // the first write ends
	w.gate <- struct{}{} // the next one, which must be of the third graph
	waitFor(t, "the loop settles", func() bool { return isIdle(l) })
	got := w.written()
	if len(got) != 2 || got[0] != first || got[1] != third {
		t.Fatalf("wrote %d graphs (%v), want the first then the third", len(got), got)
	}
	if _, n := l.idle(); n != 2 {
		t.Errorf("counted %d objects written, want 2", n)
	}
}

// Tests that a failed write is tried again, and that a newer graph offered meanwhile is written
// instead of the failed one.
func TestStatusLoopRetriesAFailedWriteUnlessANewerGraphCame(t *testing.T) {
	t.Parallel()
	w := &gatedWriter{gate: make(chan struct{}), fail: true}
	l := newStatusLoop(w)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.run(ctx)
	old, newer := &graph.Graph{}, &graph.Graph{}
	l.offer(nil, old)
	w.gate <- struct{}{} // fails
	w.gate <- struct{}{} // the retry of the same graph, fails again
	waitFor(t, "the retry is recorded", func() bool { return len(w.written()) == 2 })
	if got := w.written(); got[1] != old {
		t.Fatalf("wrote %v, want the failed graph tried again", got)
	}
	l.offer(nil, newer)
	w.mu.Lock()
	w.fail = false
	w.mu.Unlock()
	w.gate <- struct{}{}
	waitFor(t, "the loop settles", func() bool { return isIdle(l) })
	if got := w.written(); len(got) != 3 || got[2] != newer {
		t.Fatalf("wrote %v, want the newer graph after the failures", got)
	}
}

func isIdle(l *statusLoop) bool {
	ok, _ := l.idle()
	return ok
}

// passCounter counts the status passes it is asked for: whole graphs (Write), and the passes
// that judge some scopes again (WriteApplied), with the scopes.
type passCounter struct {
	mu     sync.Mutex
	whole  int
	scoped [][]cache.Scope
}

func (w *passCounter) Write(context.Context, *state.ClusterState, *graph.Graph) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.whole++
	return 0, nil
}

func (w *passCounter) WriteApplied(_ context.Context, _ *state.ClusterState, _ *graph.Graph, scopes []cache.Scope) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.scoped = append(w.scoped, scopes)
	return 0, nil
}

func (w *passCounter) counts() (whole int, scoped [][]cache.Scope) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.whole, append([][]cache.Scope(nil), w.scoped...)
}

// Tests that stream churn by one identity, 1,000 subscribe and cancel at the 5,629 answers a
// second measured, makes a bounded number of status passes (one per statusAgainInterval at
// most), each judging only the scope whose streams changed, and that the churn's end is judged.
func TestStreamChurnMakesBoundedStatusPasses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &passCounter{}
		p := &Pipeline{Status: w}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go p.RunStatus(ctx)
		synctest.Wait()
		p.status.Load().offer(nil, &graph.Graph{})
		synctest.Wait()
		web := cache.Gateway("prod", "web")
		start := time.Now()
		for range 1000 {
			p.Answered(web) // the stream opens
			time.Sleep(time.Second / 5629)
			p.Answered(web) // and closes
			time.Sleep(time.Second / 5629)
		}
		churn := time.Since(start)
		time.Sleep(statusAgainInterval)
		synctest.Wait()
		whole, scoped := w.counts()
		bound := int(churn/statusAgainInterval) + 2
		t.Logf("%d answers in %v: %d whole passes, %d scoped passes (bound %d)", 2000, churn, whole-1, len(scoped), bound)
		if whole-1+len(scoped) > bound {
			t.Errorf("the churn made %d whole and %d scoped status passes, want at most %d in all", whole-1, len(scoped), bound)
		}
		if whole != 1 {
			t.Errorf("the churn made %d passes over the whole graph, want none", whole-1)
		}
		for _, scopes := range scoped {
			if len(scopes) != 1 || scopes[0] != web {
				t.Fatalf("a pass judged %v, want only %v", scopes, web)
			}
		}
		if len(scoped) == 0 {
			t.Error("the churn's end was never judged")
		}
		cancel()
	})
}
