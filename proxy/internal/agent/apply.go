package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/proxy/internal/resource"
)

// maxNackDetail bounds the detail of a NACK, well inside discoveryv1.MaxClientMessageBytes.
const maxNackDetail = 1024

// handle builds the complete set a snapshot brings, applies it and returns the ACK, or the
// NACK with the reason when either step fails. The previous set keeps serving on a NACK.
func (a *Agent) handle(ctx context.Context, snap *discoveryv1.Snapshot) *discoveryv1.ClientMessage {
	set, err := a.build(snap)
	if err == nil {
		err = a.cfg.Applier.Apply(ctx, set)
	}
	if err != nil {
		a.cfg.Logger.Info("Rejected snapshot", "version", snap.GetVersion(), "full", snap.GetFull(),
			"error", err.Error(), "servingVersion", versionOf(a.applied))
		a.cfg.Observer.SnapshotRejected(snap.GetVersion(), err)
		return nack(snap, err)
	}
	a.applied = set
	a.cfg.Logger.Info("Applied snapshot", "version", set.Version(), "full", snap.GetFull(), "resources", set.Len())
	a.cfg.Observer.SnapshotApplied(set.Version())
	return ack(snap)
}

// build returns the complete set a snapshot brings: its resources when full, else the applied
// set with the delta merged in. The result must hash to the snapshot's version, which catches a
// delta merged over the wrong base.
func (a *Agent) build(snap *discoveryv1.Snapshot) (*resource.Set, error) {
	var (
		set *resource.Set
		err error
	)
	switch {
	case snap.GetVersion() == "":
		return nil, errors.New("snapshot has no version")
	case snap.GetFull() && len(snap.GetRemovedKeys()) > 0:
		return nil, errors.New("a full snapshot removes keys")
	case snap.GetFull():
		set, err = resource.NewSet(snap.GetVersion(), snap.GetResources())
	case a.applied == nil:
		return nil, errors.New("a delta arrived before any full snapshot")
	default:
		set, err = a.applied.Merge(snap.GetVersion(), snap.GetResources(), snap.GetRemovedKeys())
	}
	if err != nil {
		return nil, err
	}
	if err := verifyVersion(set); err != nil {
		return nil, err
	}
	return set, nil
}

// verifyVersion recomputes the content hash of set, the version the controller gives it.
func verifyVersion(set *resource.Set) error {
	want, err := cache.NewSnapshot(set.Resources(), time.Time{})
	if err != nil {
		return fmt.Errorf("hash resources: %w", err)
	}
	if want.Version() != set.Version() {
		return fmt.Errorf("resources hash to version %s, not %s", want.Version(), set.Version())
	}
	return nil
}

func ack(snap *discoveryv1.Snapshot) *discoveryv1.ClientMessage {
	return &discoveryv1.ClientMessage{Kind: &discoveryv1.ClientMessage_Ack{Ack: &discoveryv1.Ack{
		Version: snap.GetVersion(), Nonce: snap.GetNonce(),
	}}}
}

func nack(snap *discoveryv1.Snapshot, err error) *discoveryv1.ClientMessage {
	detail := err.Error()
	if len(detail) > maxNackDetail {
		detail = detail[:maxNackDetail]
	}
	return &discoveryv1.ClientMessage{Kind: &discoveryv1.ClientMessage_Nack{Nack: &discoveryv1.Nack{
		Version: snap.GetVersion(), Nonce: snap.GetNonce(), Detail: strings.ToValidUTF8(detail, "?"),
	}}}
}

func versionOf(set *resource.Set) string {
	if set == nil {
		return ""
	}
	return set.Version()
}
