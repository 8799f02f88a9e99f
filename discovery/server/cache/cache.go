package cache

import (
	"fmt"
	"maps"
	"sync"
	"time"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
)

// Cache holds the latest snapshot of every scope and wakes the watchers of a scope when its
// version changes. It is safe for concurrent use.
type Cache struct {
	now func() time.Time

	mu        sync.Mutex
	snapshots map[Scope]*Snapshot
	watches   map[Scope]map[*Watch]struct{}
}

// New returns an empty cache that stamps snapshots with now (time.Now when nil).
func New(now func() time.Time) *Cache {
	if now == nil {
		now = time.Now
	}
	return &Cache{
		now:       now,
		snapshots: make(map[Scope]*Snapshot),
		watches:   make(map[Scope]map[*Watch]struct{}),
	}
}

// Set replaces the resources of scope and reports whether its version changed. An unchanged
// content hash keeps the current snapshot and wakes nobody. The snapshot a new version replaces
// drops its encodings (see Snapshot.Encode). Resources must not be modified after the call.
func (c *Cache) Set(scope Scope, resources []*discoveryv1.Resource) (bool, error) {
	if err := scope.Validate(); err != nil {
		return false, err
	}
	snap, err := NewSnapshot(resources, time.Time{})
	if err != nil {
		return false, fmt.Errorf("set %s: %w", scope, err)
	}
	return c.SetSnapshot(scope, snap)
}

// SetSnapshot is Set for a snapshot its caller built with NewSnapshot (an encoder that needed
// its version first): it is published as it is, stamped with the cache's clock, and not hashed
// again. snap must be new to the cache and given to it once.
func (c *Cache) SetSnapshot(scope Scope, snap *Snapshot) (bool, error) {
	if err := scope.Validate(); err != nil {
		return false, err
	}
	snap.createdAt = c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.snapshots[scope]
	if cur != nil && cur.Version() == snap.Version() {
		return false, nil
	}
	if cur != nil {
		cur.drop()
	}
	c.snapshots[scope] = snap
	c.notifyLocked(scope)
	return true, nil
}

// Delete forgets the snapshot of scope, for example after its Gateway was deleted, and reports
// whether there was one. Live watchers keep what they hold; the stream server revokes them.
func (c *Cache) Delete(scope Scope) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur, ok := c.snapshots[scope]
	if ok {
		cur.drop()
	}
	delete(c.snapshots, scope)
	return ok
}

// Get returns the current snapshot of scope, or nil when none was set.
func (c *Cache) Get(scope Scope) *Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.snapshots[scope]
}

// Snapshots returns the current snapshot of every scope.
func (c *Cache) Snapshots() map[Scope]*Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.snapshots)
}

// Watch registers interest in scope. Its Changed channel fires once for any number of version
// changes since the last receive (coalescing), and at once when a snapshot already exists.
func (c *Cache) Watch(scope Scope) *Watch {
	w := &Watch{cache: c, scope: scope, changed: make(chan struct{}, 1)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watches[scope] == nil {
		c.watches[scope] = make(map[*Watch]struct{})
	}
	c.watches[scope][w] = struct{}{}
	if c.snapshots[scope] != nil {
		w.signal()
	}
	return w
}

func (c *Cache) notifyLocked(scope Scope) {
	for w := range c.watches[scope] {
		w.signal()
	}
}

func (c *Cache) cancel(w *Watch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.watches[w.scope], w)
	if len(c.watches[w.scope]) == 0 {
		delete(c.watches, w.scope)
	}
}

// Watch is one watcher's interest in a scope.
type Watch struct {
	cache   *Cache
	scope   Scope
	changed chan struct{}
}

// Changed fires when the scope's snapshot may have a new version.
func (w *Watch) Changed() <-chan struct{} { return w.changed }

// Snapshot returns the current snapshot of the watched scope, or nil.
func (w *Watch) Snapshot() *Snapshot { return w.cache.Get(w.scope) }

// Cancel unregisters the watch; it is safe to call more than once.
func (w *Watch) Cancel() { w.cache.cancel(w) }

func (w *Watch) signal() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}
