package cache

import (
	"fmt"
	"sync"

	"google.golang.org/protobuf/proto"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
)

// MaxDeltaEncodings bounds the delta encodings a snapshot keeps, one per version a proxy moved
// from: proxies usually hold one or two versions when the next is set. A delta from an older
// base evicts the oldest kept one.
const MaxDeltaEncodings = 8

// encodings are the bodies made from one snapshot, each once. The cache drops them when it
// supersedes or deletes the snapshot; later calls encode without keeping the result.
type encodings struct {
	mu         sync.Mutex
	superseded bool
	full       *body
	// deltas are keyed by the version they start from, oldest first.
	deltas []delta
}

type delta struct {
	from string
	body *body
}

// body is one encoding, made by the first caller while later ones wait for it.
type body struct {
	once  sync.Once
	bytes []byte
	err   error
}

func (b *body) get(msg func() *discoveryv1.Snapshot) (bytes []byte, fresh bool, err error) {
	b.once.Do(func() {
		fresh = true
		b.bytes, b.err = proto.Marshal(msg())
	})
	return b.bytes, fresh, b.err
}

// Encode returns the wire encoding of the Snapshot message that brings a proxy holding prev to
// s: the full snapshot when prev is nil, else the delta from prev. The nonce (field 2) is left
// out, for each stream to append its own; protobuf reads a field appended after the others as
// if it stood in order. fresh says that this call made the bytes; every other caller of the
// same (prev version, s) gets the same bytes until the cache supersedes s. Callers must not
// modify them.
//
// A delta is keyed by prev's version, a hash of prev's whole content, so it is the same for
// every proxy that acknowledged that content, whatever scope its snapshot was set for.
func (s *Snapshot) Encode(prev *Snapshot) (bytes []byte, fresh bool, err error) {
	msg := func() *discoveryv1.Snapshot {
		m := &discoveryv1.Snapshot{Version: s.version, Full: prev == nil}
		if prev == nil {
			m.Resources = s.resources
		} else {
			m.Resources, m.RemovedKeys = Diff(prev, s)
		}
		return m
	}
	bytes, fresh, err = s.enc.body(prev).get(msg)
	if err != nil {
		return nil, false, fmt.Errorf("encode snapshot %s: %w", s.version, err)
	}
	return bytes, fresh, nil
}

// body returns the body of the encoding from prev, kept for later callers unless superseded.
func (e *encodings) body(prev *Snapshot) *body {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.superseded {
		return &body{}
	}
	if prev == nil {
		if e.full == nil {
			e.full = &body{}
		}
		return e.full
	}
	for _, d := range e.deltas {
		if d.from == prev.version {
			return d.body
		}
	}
	if len(e.deltas) == MaxDeltaEncodings {
		e.deltas = append(e.deltas[:0], e.deltas[1:]...)
	}
	b := &body{}
	e.deltas = append(e.deltas, delta{from: prev.version, body: b})
	return b
}

// drop forgets every encoding and keeps none made later: nobody sends a superseded snapshot
// again but the streams that were about to.
func (e *encodings) drop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.superseded, e.full, e.deltas = true, nil, nil
}

// EncodedSize returns the size in bytes of the full snapshot's encoding, nonce left out.
func (s *Snapshot) EncodedSize() int { return s.size }
