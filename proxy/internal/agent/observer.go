package agent

import (
	"context"
	"time"

	"coxswain.dev/coxswain/proxy/internal/resource"
)

// Applier installs routing state; the data plane implements it. Apply gets a complete,
// immutable resource set (deltas are already merged): it must validate the set and either swap
// it in atomically and return nil, or return an error and keep serving what it had, which the
// agent then reports to the controller with a NACK. The error text is logged and sent to the
// controller, so it must never hold secret material (listener private keys). The agent calls
// Apply from one goroutine, never concurrently, and never with anything that clears the state
// on a disconnect.
type Applier interface {
	Apply(ctx context.Context, set *resource.Set) error
}

// Observer is told what the agent does, for readiness and metrics (health.Tracker implements
// it). Its methods are called from the agent's goroutines and must not block.
type Observer interface {
	// SVIDIssued: a bootstrap returned an SVID valid until notAfter.
	SVIDIssued(notAfter time.Time)
	// BootstrapFailed: a bootstrap attempt failed and will be retried.
	BootstrapFailed(err error)
	// StreamOpened: a stream is open and subscribed.
	StreamOpened()
	// StreamClosed: the stream ended, or could not open, because of err.
	StreamClosed(err error)
	// SnapshotApplied: the snapshot at version was applied and acknowledged.
	SnapshotApplied(version string)
	// SnapshotRejected: the snapshot at version was refused; the previous one keeps serving.
	SnapshotRejected(version string, err error)
	// Stopped: the agent gave up for good because of err.
	Stopped(err error)
}

type nopObserver struct{}

func (nopObserver) SVIDIssued(time.Time)           {}
func (nopObserver) BootstrapFailed(error)          {}
func (nopObserver) StreamOpened()                  {}
func (nopObserver) StreamClosed(error)             {}
func (nopObserver) SnapshotApplied(string)         {}
func (nopObserver) SnapshotRejected(string, error) {}
func (nopObserver) Stopped(error)                  {}
