package resource

import (
	"cmp"
	"errors"
	"fmt"
	"iter"
	"slices"

	"google.golang.org/protobuf/types/known/anypb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
)

// ErrInvalid reports a resource set or delta that breaks the envelope rules: a key that is
// empty or used twice, a missing payload, or a delta that removes what is not there.
var ErrInvalid = errors.New("invalid resource set")

// Set is an immutable, complete set of resources at one version, sorted by key with unique keys.
// Neither the Set nor the resources it holds may be modified once built; the zero value is an
// empty set without a version.
type Set struct {
	version   string
	resources []*discoveryv1.Resource
}

// NewSet returns the set of resources at version. It takes ownership of the resources, which
// the caller must not modify afterwards. Keys must be unique.
func NewSet(version string, resources []*discoveryv1.Resource) (*Set, error) {
	sorted := slices.Clone(resources)
	slices.SortFunc(sorted, compareKeys)
	for i := 1; i < len(sorted); i++ {
		if sorted[i].GetKey() == sorted[i-1].GetKey() {
			return nil, fmt.Errorf("%w: key %q appears twice", ErrInvalid, sorted[i].GetKey())
		}
	}
	return &Set{version: version, resources: sorted}, nil
}

func compareKeys(a, b *discoveryv1.Resource) int { return cmp.Compare(a.GetKey(), b.GetKey()) }

// Merge returns the set at version made of s with upserts inserted or replaced and the removed
// keys deleted. A key may appear once in upserts and removed together, and every removed key
// must be in s. s is not changed.
func (s *Set) Merge(version string, upserts []*discoveryv1.Resource, removed []string) (*Set, error) {
	byKey := make(map[string]*discoveryv1.Resource, len(s.resources)+len(upserts))
	for _, r := range s.resources {
		byKey[r.GetKey()] = r
	}
	gone := make(map[string]bool, len(removed))
	for _, k := range removed {
		if _, ok := byKey[k]; !ok || gone[k] {
			return nil, fmt.Errorf("%w: removed key %q is not held", ErrInvalid, k)
		}
		gone[k] = true
		delete(byKey, k)
	}
	seen := make(map[string]bool, len(upserts))
	for _, r := range upserts {
		k := r.GetKey()
		if seen[k] || gone[k] {
			return nil, fmt.Errorf("%w: key %q is changed twice in one delta", ErrInvalid, k)
		}
		seen[k] = true
		byKey[k] = r
	}
	merged := make([]*discoveryv1.Resource, 0, len(byKey))
	for _, r := range byKey {
		merged = append(merged, r)
	}
	return NewSet(version, merged)
}

// Validate checks the envelope of every resource: a non-empty key and a payload with a type.
// Whether a payload makes sense is for the data plane to judge.
func (s *Set) Validate() error {
	var errs []error
	for _, r := range s.resources {
		switch {
		case r.GetKey() == "":
			errs = append(errs, fmt.Errorf("%w: a resource has no key", ErrInvalid))
		case r.GetPayload() == nil:
			errs = append(errs, fmt.Errorf("%w: resource %q has no payload", ErrInvalid, r.GetKey()))
		case r.GetPayload().GetTypeUrl() == "":
			errs = append(errs, fmt.Errorf("%w: the payload of resource %q has no type", ErrInvalid, r.GetKey()))
		}
	}
	return errors.Join(errs...)
}

// Version returns the version of the set: the content hash the controller gave it.
func (s *Set) Version() string { return s.version }

// Len returns the number of resources.
func (s *Set) Len() int { return len(s.resources) }

// Get returns the payload of key.
func (s *Set) Get(key string) (*anypb.Any, bool) {
	i, ok := slices.BinarySearchFunc(s.resources, key, func(r *discoveryv1.Resource, k string) int {
		return cmp.Compare(r.GetKey(), k)
	})
	if !ok {
		return nil, false
	}
	return s.resources[i].GetPayload(), true
}

// All yields every key and payload in key order.
func (s *Set) All() iter.Seq2[string, *anypb.Any] {
	return func(yield func(string, *anypb.Any) bool) {
		for _, r := range s.resources {
			if !yield(r.GetKey(), r.GetPayload()) {
				return
			}
		}
	}
}

// Keys returns the keys in order.
func (s *Set) Keys() []string {
	keys := make([]string, len(s.resources))
	for i, r := range s.resources {
		keys[i] = r.GetKey()
	}
	return keys
}

// Resources returns the resources in key order. The slice is a copy; the resources are shared
// and must not be modified.
func (s *Set) Resources() []*discoveryv1.Resource { return slices.Clone(s.resources) }
