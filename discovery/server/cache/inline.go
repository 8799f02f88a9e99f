package cache

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/routeset"
)

// DefaultMaxInlineBytes is the largest snapshot, by the size of its full encoding, whose inline
// layout the server makes.
const DefaultMaxInlineBytes = 16 << 20

// inlined is a snapshot's inline layout, made once, when a stream first asks for it.
type inlined struct {
	once sync.Once
	mu   sync.Mutex
	snap *Snapshot
	err  error
	// superseded says the cache replaced or deleted the snapshot: an inline layout made later
	// keeps no encodings either.
	superseded bool
}

// ErrInlineTooLarge reports a snapshot too large for Inline to make its inline layout.
var ErrInlineTooLarge = errors.New("cache: snapshot too large for a stream without route sets")

// Inline returns the snapshot in the layout of a proxy that did not subscribe with route sets
// (Subscribe.route_sets): every RouteSet's routes assembled into its Listener
// (routeset.Inline), under a version of its own, the hash of those resources. It is made once
// per snapshot and shared by every such stream, with its encodings; the snapshot itself when it
// holds no RouteSet. The resources it shares with s keep their digests.
//
// A snapshot with RouteSets whose full encoding is larger than maxBytes has none: Inline
// returns ErrInlineTooLarge and builds nothing. The inline layout is a second copy of the
// snapshot's listeners, which every change rebuilds whole, so this bounds what a stream without
// route sets makes the controller build.
func (s *Snapshot) Inline(maxBytes int) (*Snapshot, error) {
	if s.size > maxBytes && s.hasRouteSets() {
		return nil, fmt.Errorf("%w: snapshot %s encodes to %d bytes, more than the %d bytes of the largest one made without route sets; a proxy that subscribes with route sets takes it",
			ErrInlineTooLarge, s.version, s.size, maxBytes)
	}
	s.inline.once.Do(func() {
		snap, err := s.makeInline()
		s.inline.mu.Lock()
		defer s.inline.mu.Unlock()
		s.inline.snap, s.inline.err = snap, err
		if s.inline.superseded && snap != nil && snap != s {
			snap.enc.drop()
		}
	})
	s.inline.mu.Lock()
	defer s.inline.mu.Unlock()
	return s.inline.snap, s.inline.err
}

// hasRouteSets reports whether the snapshot holds a RouteSet: its resources are sorted by key.
func (s *Snapshot) hasRouteSets() bool {
	i, _ := slices.BinarySearchFunc(s.resources, routeset.KeyPrefix, func(r *discoveryv1.Resource, prefix string) int {
		return strings.Compare(r.GetKey(), prefix)
	})
	return i < len(s.resources) && strings.HasPrefix(s.resources[i].GetKey(), routeset.KeyPrefix)
}

func (s *Snapshot) makeInline() (*Snapshot, error) {
	resources, err := routeset.Inline(s.resources)
	if err != nil {
		return nil, err
	}
	if len(resources) == len(s.resources) && (len(resources) == 0 || &resources[0] == &s.resources[0]) {
		return s, nil
	}
	out, err := NewSnapshotReusing(s, resources, s.createdAt)
	if err != nil {
		return nil, err
	}
	out.changedAt, out.trace = s.changedAt, s.trace
	return out, nil
}

// drop forgets the encodings of the snapshot and of its inline layout, and keeps none made later.
func (s *Snapshot) drop() {
	s.enc.drop()
	s.inline.mu.Lock()
	defer s.inline.mu.Unlock()
	s.inline.superseded = true
	if d := s.inline.snap; d != nil && d != s {
		d.enc.drop()
	}
}
