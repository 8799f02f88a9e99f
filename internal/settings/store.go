package settings

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
)

// Store holds the effective settings and tells subscribers when they change. The zero value is
// not usable; use NewStore or NewPendingStore.
type Store struct {
	mu       sync.Mutex
	current  Settings
	subs     []chan struct{}
	loaded   chan struct{}
	loadOnce sync.Once
}

// NewStore returns a store holding initial, final from the start (Loaded is closed).
func NewStore(initial Settings) *Store {
	s := NewPendingStore(initial)
	s.MarkLoaded()
	return s
}

// NewPendingStore returns a store holding initial whose settings are not final until
// MarkLoaded: the operator's, until its CoxswainConfig has been read once. What must not act
// on settings about to change (the discovery listeners, which issue SVIDs of the configured
// lifetime) waits for Loaded.
func NewPendingStore(initial Settings) *Store {
	return &Store{current: initial, loaded: make(chan struct{})}
}

// MarkLoaded records that the settings in force are final: the CoxswainConfig was read (or
// found absent, or refused with the settings kept). Later calls do nothing.
func (s *Store) MarkLoaded() { s.loadOnce.Do(func() { close(s.loaded) }) }

// Loaded is closed once MarkLoaded was called.
func (s *Store) Loaded() <-chan struct{} { return s.loaded }

// Get returns the settings in force.
func (s *Store) Get() Settings {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current
}

// Set replaces the settings and notifies subscribers when they changed. It reports whether they
// changed.
func (s *Store) Set(next Settings) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if equality.Semantic.DeepEqual(s.current, next) {
		return false
	}
	s.current = next
	for _, c := range s.subs {
		select {
		case c <- struct{}{}:
		default: // a notification is already pending
		}
	}
	return true
}

// Subscribe returns a channel that receives a value after each change. Notifications coalesce:
// a slow reader sees one pending value, then reads the latest settings with Get.
func (s *Store) Subscribe() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := make(chan struct{}, 1)
	s.subs = append(s.subs, c)
	return c
}
