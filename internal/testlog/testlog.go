// Package testlog gives tests a logr.Logger that writes to the test's log until the test's
// cleanup and drops what comes later.
//
// controller-runtime's manager logs from a goroutine of its stop procedure that Start does not
// wait for ("Stopping and waiting for warmup runnables"), so a manager stopped in a cleanup may
// log after the test ended, and testing panics at a t.Log after the end of its test.
package testlog

import (
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
)

// New returns a logger writing to t, cut off at t's cleanup. Cleanups run last registered
// first, so the cut comes after the cleanups registered later, the manager's stop among them.
func New(t *testing.T) logr.Logger {
	return newTo(t, t)
}

// newTo is New writing to out, cut off at t's cleanup.
func newTo(t testing.TB, out testr.TestingT) logr.Logger {
	c := &cutoff{}
	t.Cleanup(func() {
		c.mu.Lock()
		c.done = true
		c.mu.Unlock()
	})
	return logr.New(sink{LogSink: testr.NewWithInterface(out, testr.Options{}).GetSink(), c: c})
}

// cutoff is shared by a logger and every logger derived from it.
type cutoff struct {
	mu   sync.Mutex
	done bool
}

// sink forwards to the test's sink while the cutoff is not reached. The lock is held while it
// writes, so that a write either ends before the cut or does not start.
type sink struct {
	logr.LogSink
	c *cutoff
}

func (s sink) Info(level int, msg string, keysAndValues ...any) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	if !s.c.done {
		s.LogSink.Info(level, msg, keysAndValues...)
	}
}

func (s sink) Error(err error, msg string, keysAndValues ...any) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	if !s.c.done {
		s.LogSink.Error(err, msg, keysAndValues...)
	}
}

func (s sink) WithValues(keysAndValues ...any) logr.LogSink {
	return sink{LogSink: s.LogSink.WithValues(keysAndValues...), c: s.c}
}

func (s sink) WithName(name string) logr.LogSink {
	return sink{LogSink: s.LogSink.WithName(name), c: s.c}
}
