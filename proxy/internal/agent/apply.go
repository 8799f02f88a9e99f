package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/client"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/proxy/internal/resource"
)

// handle builds the complete set a snapshot brings, applies it and ACKs it, or NACKs it with
// the reason when either step fails; the previous set keeps serving then. An error means the
// answer could not be sent.
func (a *Agent) handle(ctx context.Context, st *client.Stream, snap *discoveryv1.Snapshot) error {
	set, hashed, err := a.build(snap)
	if err == nil {
		err = a.cfg.Applier.Apply(ctx, set)
	}
	if err != nil {
		a.cfg.Logger.Info("Rejected snapshot", "version", snap.GetVersion(), "full", snap.GetFull(),
			"error", err.Error(), "servingVersion", versionOf(a.applied))
		a.cfg.Observer.SnapshotRejected(snap.GetVersion(), err)
		return answerError(st, st.Nack(snap, err))
	}
	a.applied, a.hashed = set, hashed
	a.persist(set, a.current.Load())
	a.cfg.Logger.Info("Applied snapshot", "version", set.Version(), "full", snap.GetFull(), "resources", set.Len())
	a.cfg.Observer.SnapshotApplied(set.Version())
	return answerError(st, st.Ack(snap))
}

// answerError explains a failed ACK or NACK: on io.EOF the stream ended, and Recv tells why.
func answerError(st *client.Stream, err error) error {
	if !errors.Is(err, io.EOF) {
		return err
	}
	for {
		if _, err := st.Recv(); err != nil {
			return err
		}
	}
}

// build returns the complete set a snapshot brings, with its content hash: its resources when
// full, else the applied set with the delta merged in. The result must hash to the snapshot's
// version, which catches a delta merged over the wrong base.
func (a *Agent) build(snap *discoveryv1.Snapshot) (*resource.Set, *cache.Snapshot, error) {
	var (
		set *resource.Set
		err error
	)
	switch {
	case snap.GetVersion() == "":
		return nil, nil, errors.New("snapshot has no version")
	case snap.GetFull() && len(snap.GetRemovedKeys()) > 0:
		return nil, nil, errors.New("a full snapshot removes keys")
	case snap.GetFull():
		set, err = resource.NewSet(snap.GetVersion(), snap.GetResources())
	case a.applied == nil:
		return nil, nil, errors.New("a delta arrived before any full snapshot")
	default:
		set, err = a.applied.Merge(snap.GetVersion(), snap.GetResources(), snap.GetRemovedKeys())
	}
	if err != nil {
		return nil, nil, err
	}
	hashed, err := verifyVersion(set, a.hashed)
	if err != nil {
		return nil, nil, err
	}
	return set, hashed, nil
}

// verifyVersion recomputes the content hash of set, the version the controller gives it,
// hashing only the resources prev (the applied set's hash, nil for none) does not hold.
func verifyVersion(set *resource.Set, prev *cache.Snapshot) (*cache.Snapshot, error) {
	want, err := cache.NewSnapshotReusing(prev, set.Resources(), time.Time{})
	if err != nil {
		return nil, fmt.Errorf("hash resources: %w", err)
	}
	if want.Version() != set.Version() {
		return nil, fmt.Errorf("resources hash to version %s, not %s", want.Version(), set.Version())
	}
	return want, nil
}

func versionOf(set *resource.Set) string {
	if set == nil {
		return ""
	}
	return set.Version()
}
