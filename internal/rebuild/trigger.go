package rebuild

import (
	"sync"
	"time"
)

// Trigger labels that are not object kinds.
const (
	// TriggerElected is the change of a replica that became the leader and rebuilds to write
	// status at once.
	TriggerElected = "Elected"
	// TriggerMultiple labels a rebuild that coalesced changes of more than one kind.
	TriggerMultiple = "Multiple"
	// TriggerNone labels a rebuild that no recorded change asked for: a change the previous
	// rebuild already read from the cache, or nothing at all.
	TriggerNone = "None"
)

// Trigger counts, by kind (HTTPRoute, Service, ..., or TriggerElected), the changes that one
// rebuild handles.
type Trigger map[string]int

// Label is the trigger's metric label: its kind when every change was of one kind,
// TriggerMultiple when changes of several kinds coalesced into the rebuild, and TriggerNone
// when there was none. The counts per kind are in the rebuild's log line.
func (t Trigger) Label() string {
	switch len(t) {
	case 0:
		return TriggerNone
	case 1:
		for kind := range t {
			return kind
		}
	}
	return TriggerMultiple
}

// Changes collects the kinds of the changes that arrive between two rebuilds, and when the
// earliest of them arrived. The zero value is ready to use (with the real clock), and it is safe
// for concurrent use.
type Changes struct {
	// Now is the clock; nil is time.Now.
	Now func() time.Time

	mu      sync.Mutex
	pending Trigger
	// since is when the earliest pending change was recorded; zero with none pending.
	since time.Time
}

func (c *Changes) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// Add records one change of kind. Call it before triggering the rebuild, so that the rebuild
// takes it.
func (c *Changes) Add(kind string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending == nil {
		c.pending = Trigger{}
	}
	if len(c.pending) == 0 {
		c.since = c.now()
	}
	c.pending[kind]++
}

// Take returns the changes recorded since the last Take, and when the earliest of them was
// recorded (zero with none), and forgets them. A rebuild takes them before it reads the cache: a
// change recorded later is handled by the next rebuild, which its trigger asks for.
func (c *Changes) Take() (Trigger, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, since := c.pending, c.since
	c.pending, c.since = nil, time.Time{}
	if t == nil {
		return Trigger{}, time.Time{}
	}
	return t, since
}

// Restore gives back the changes of a rebuild that failed, with when the earliest of them was
// recorded, so that its retry reports them and times them from then.
func (c *Changes) Restore(t Trigger, since time.Time) {
	if len(t) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending == nil {
		c.pending = make(Trigger, len(t))
	}
	if len(c.pending) == 0 || (!since.IsZero() && since.Before(c.since)) {
		c.since = since
	}
	for kind, n := range t {
		c.pending[kind] += n
	}
}
