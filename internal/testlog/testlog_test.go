package testlog

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

// lines records what a logger writes.
type lines struct {
	mu  sync.Mutex
	got []string
}

func (*lines) Helper() {}

func (l *lines) Log(args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, fmt.Sprint(args...))
}

// Tests that a logger and the loggers derived from it write during their test and that what
// they log after the test's cleanup, as a goroutine the test did not wait for may, is dropped.
func TestLogAfterTheCleanupIsDropped(t *testing.T) {
	out := &lines{}
	var after func()
	t.Run("inner", func(t *testing.T) {
		log := newTo(t, out)
		derived := log.WithName("inner").WithValues("k", "v")
		log.Info("during")
		derived.Error(nil, "during, derived")
		after = func() {
			log.Info("after")
			derived.Info("after, derived")
			derived.Error(nil, "after, derived")
		}
	})
	after()
	out.mu.Lock()
	defer out.mu.Unlock()
	if len(out.got) != 2 || !strings.Contains(out.got[0], "during") || !strings.Contains(out.got[1], "during, derived") {
		t.Errorf("logged %q, want the two lines logged during the test", out.got)
	}
	if slices.ContainsFunc(out.got, func(l string) bool { return strings.Contains(l, "after") }) {
		t.Errorf("logged %q after the cleanup", out.got)
	}
}
