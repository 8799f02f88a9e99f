package cache

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
)

// ErrInvalidResource reports a resource without a key or payload, or a key used twice.
var ErrInvalidResource = errors.New("cache: invalid resource")

// digest is the SHA-256 of one resource's deterministic payload encoding.
type digest [sha256.Size]byte

// Snapshot is an immutable, versioned set of resources sorted by key.
type Snapshot struct {
	version   string
	createdAt time.Time
	// changedAt is when the controller saw the earliest object change this version includes;
	// zero when unknown.
	changedAt time.Time
	// trace is the context of the work that made this version (the controller's rebuild span),
	// nil when none.
	trace     context.Context
	resources []*discoveryv1.Resource
	// digests and sizes hold each resource's digest and the size of its encoding, in the order
	// of resources.
	digests []digest
	sizes   []int
	// size is the size of the full snapshot's encoding.
	size int
	enc  encodings
	// inline is the snapshot's layout for proxies that take no route sets (see Inline).
	inline inlined
}

// NewSnapshot sorts and hashes resources. The version is the hex SHA-256 over every (key,
// payload) pair in key order, payloads marshalled deterministically, so equal contents give
// equal versions regardless of input order. Resources must not be modified afterwards.
func NewSnapshot(resources []*discoveryv1.Resource, now time.Time) (*Snapshot, error) {
	return NewSnapshotReusing(nil, resources, now)
}

// NewSnapshotReusing is NewSnapshot for a snapshot that follows prev (which may be nil): a
// resource that is the very resource (the same pointer, under the same key) prev holds is not
// marshalled and hashed again, its digest is taken from prev. Resources are immutable once in a
// snapshot, so the version is the one NewSnapshot gives.
func NewSnapshotReusing(prev *Snapshot, resources []*discoveryv1.Resource, now time.Time) (*Snapshot, error) {
	sorted := slices.Clone(resources)
	byKey := func(a, b *discoveryv1.Resource) int { return cmp.Compare(a.GetKey(), b.GetKey()) }
	if !slices.IsSortedFunc(sorted, byKey) {
		slices.SortFunc(sorted, byKey)
	}
	s := &Snapshot{createdAt: now, resources: sorted, digests: make([]digest, len(sorted)), sizes: make([]int, len(sorted))}
	h := sha256.New()
	var old []*discoveryv1.Resource
	if prev != nil {
		old = prev.resources
	}
	full, at := 0, 0
	var fields []byte
	for i, r := range sorted {
		if i > 0 && sorted[i-1].GetKey() == r.GetKey() {
			return nil, fmt.Errorf("%w: duplicate key %q", ErrInvalidResource, r.GetKey())
		}
		for at < len(old) && old[at].GetKey() < r.GetKey() {
			at++
		}
		if at < len(old) && old[at] == r {
			s.digests[i], s.sizes[i] = prev.digests[at], prev.sizes[at]
		} else {
			var err error
			if s.digests[i], err = resourceDigest(r); err != nil {
				return nil, err
			}
			s.sizes[i] = proto.Size(r)
		}
		full += protowire.SizeTag(snapshotResources) + protowire.SizeBytes(s.sizes[i])
		fields = binary.BigEndian.AppendUint64(fields[:0], uint64(len(r.GetKey())))
		fields = append(fields, r.GetKey()...)
		fields = binary.BigEndian.AppendUint64(fields, uint64(len(s.digests[i])))
		fields = append(fields, s.digests[i][:]...)
		h.Write(fields) // each field length-prefixed, so that no two field sequences hash alike
	}
	s.version = hex.EncodeToString(h.Sum(nil))
	// The full snapshot's encoding: its version, full = true and every resource.
	s.size = full + protowire.SizeTag(snapshotVersion) + protowire.SizeBytes(len(s.version)) +
		protowire.SizeTag(snapshotFull) + protowire.SizeVarint(1)
	return s, nil
}

// Field numbers of Snapshot, from its descriptor.
var snapshotVersion, snapshotFull, snapshotResources = func() (protowire.Number, protowire.Number, protowire.Number) {
	fields := (&discoveryv1.Snapshot{}).ProtoReflect().Descriptor().Fields()
	return fields.ByName("version").Number(), fields.ByName("full").Number(), fields.ByName("resources").Number()
}()

func resourceDigest(r *discoveryv1.Resource) (digest, error) {
	if r.GetKey() == "" || r.GetPayload() == nil {
		return digest{}, fmt.Errorf("%w: key %q without key or payload", ErrInvalidResource, r.GetKey())
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r.GetPayload())
	if err != nil {
		return digest{}, fmt.Errorf("marshal resource %q: %w", r.GetKey(), err)
	}
	return sha256.Sum256(b), nil
}

// Version returns the content hash of the snapshot.
func (s *Snapshot) Version() string { return s.version }

// CreatedAt returns when the snapshot was set, for the set-to-ACK latency.
func (s *Snapshot) CreatedAt() time.Time { return s.createdAt }

// ChangedAt returns when the earliest object change this version includes was seen, as
// SetChangedAt recorded it; zero when unknown.
func (s *Snapshot) ChangedAt() time.Time { return s.changedAt }

// SetChangedAt records when the earliest object change this version includes was seen (the
// controller's watch event), for the change-to-convergence latency. Call it before the snapshot
// is given to the cache.
func (s *Snapshot) SetChangedAt(t time.Time) { s.changedAt = t }

// TraceContext returns the context SetTraceContext recorded, nil when none: what the spans of
// this version's delivery are children of.
func (s *Snapshot) TraceContext() context.Context { return s.trace }

// SetTraceContext records the context of the work that made this version (it carries the
// controller's rebuild span), so that its convergence can be traced under it. Call it before
// the snapshot is given to the cache.
func (s *Snapshot) SetTraceContext(ctx context.Context) { s.trace = ctx }

// Resources returns the resources sorted by key. Callers must not modify them.
func (s *Snapshot) Resources() []*discoveryv1.Resource { return slices.Clone(s.resources) }

// Len returns the number of resources.
func (s *Snapshot) Len() int { return len(s.resources) }

// Diff returns what turns prev into next: the resources of next that prev lacks or holds with
// another payload, and the keys of prev that next lacks, both sorted by key.
func Diff(prev, next *Snapshot) (upserts []*discoveryv1.Resource, removed []string) {
	i, j := 0, 0
	for i < len(prev.resources) || j < len(next.resources) {
		switch {
		case j == len(next.resources) || i < len(prev.resources) && prev.resources[i].GetKey() < next.resources[j].GetKey():
			removed = append(removed, prev.resources[i].GetKey())
			i++
		case i == len(prev.resources) || next.resources[j].GetKey() < prev.resources[i].GetKey():
			upserts = append(upserts, next.resources[j])
			j++
		default:
			if prev.digests[i] != next.digests[j] {
				upserts = append(upserts, next.resources[j])
			}
			i, j = i+1, j+1
		}
	}
	return upserts, removed
}

// NewResource wraps msg into a keyed resource, marshalling it deterministically so that equal
// messages always give equal payload bytes and therefore equal versions.
func NewResource(key string, msg proto.Message) (*discoveryv1.Resource, error) {
	payload := &anypb.Any{}
	if err := anypb.MarshalFrom(payload, msg, proto.MarshalOptions{Deterministic: true}); err != nil {
		return nil, fmt.Errorf("marshal resource %q: %w", key, err)
	}
	return &discoveryv1.Resource{Key: key, Payload: payload}, nil
}
