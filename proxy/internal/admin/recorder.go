package admin

import (
	"context"
	"sync/atomic"
	"time"

	"coxswain.dev/coxswain/proxy/internal/resource"
)

// Applier installs a complete resource set; the data plane is one (agent.Applier).
type Applier interface {
	Apply(ctx context.Context, set *resource.Set) error
}

// Applied is a resource set the data plane took, and when.
type Applied struct {
	Set *resource.Set
	At  time.Time
}

// Recorder is the Applier the agent calls: it passes every set to the data plane and keeps the
// last one the data plane took, so that the admin port shows what serves, never a set that was
// refused. Apply is called from one goroutine; Applied from any.
type Recorder struct {
	next Applier
	now  func() time.Time
	last atomic.Pointer[Applied]
}

// NewRecorder returns a Recorder in front of next; now tells the time of each apply.
func NewRecorder(next Applier, now func() time.Time) *Recorder {
	return &Recorder{next: next, now: now}
}

// Apply applies set to the data plane and records it when the data plane took it.
func (r *Recorder) Apply(ctx context.Context, set *resource.Set) error {
	if err := r.next.Apply(ctx, set); err != nil {
		return err
	}
	r.last.Store(&Applied{Set: set, At: r.now()})
	return nil
}

// Applied returns the set applied last, or nil before the first.
func (r *Recorder) Applied() *Applied { return r.last.Load() }
