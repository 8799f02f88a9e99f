package cache

import (
	"sync"

	"coxswain.dev/coxswain/discovery/routeset"
)

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

// Inline returns the snapshot in the layout of a proxy that did not subscribe with route sets
// (Subscribe.route_sets): every RouteSet's routes assembled into its Listener
// (routeset.Inline), under a version of its own, the hash of those resources. It is made once
// per snapshot and shared by every such stream, with its encodings; the snapshot itself when it
// holds no RouteSet. The resources it shares with s keep their digests.
func (s *Snapshot) Inline() (*Snapshot, error) {
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
