package store

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/go-logr/logr"

	"coxswain.dev/coxswain/proxy/internal/resource"
)

// ErrNoVersion reports a set without a version.
var ErrNoVersion = errors.New("store: resource set has no version")

// Store holds the current resource set behind an atomic pointer. Apply may be called from one
// goroutine at a time; Current from any number, at any time.
type Store struct {
	log     logr.Logger
	current atomic.Pointer[resource.Set]
}

// New returns an empty store.
func New(log logr.Logger) *Store {
	return &Store{log: log}
}

// Apply validates set and makes it current. On error the current set is unchanged.
func (s *Store) Apply(_ context.Context, set *resource.Set) error {
	if set == nil {
		return errors.New("store: nil resource set")
	}
	if set.Version() == "" {
		return ErrNoVersion
	}
	if err := set.Validate(); err != nil {
		return fmt.Errorf("store: validate version %s: %w", set.Version(), err)
	}
	prev := s.current.Swap(set)
	s.log.V(1).Info("Swapped resource set", "version", set.Version(), "resources", set.Len(),
		"previousVersion", versionOf(prev))
	return nil
}

// Current returns the set applied last, or nil before the first Apply. The set is immutable.
func (s *Store) Current() *resource.Set {
	return s.current.Load()
}

func versionOf(set *resource.Set) string {
	if set == nil {
		return ""
	}
	return set.Version()
}
