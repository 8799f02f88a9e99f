package stream

import "sync"

// DefaultMaxInFlightBytesPerIdentity is how many bytes of snapshots the streams of one identity
// may have sent and not had answered: two of the largest messages.
const DefaultMaxInFlightBytesPerIdentity = 128 << 20

// bodyKey names one shared encoding: the full snapshot of a version (base empty) or its delta
// from base. Streams sending the same one share its bytes.
type bodyKey struct{ version, base string }

// budget accounts the bytes in flight of each identity, each shared encoding counted once
// however many of the identity's streams are sending it. It is safe for concurrent use.
type budget struct {
	max int64

	mu  sync.Mutex
	ids map[string]*held
}

// held is what one identity has in flight.
type held struct {
	total  int64
	bodies map[bodyKey]*heldBody
}

type heldBody struct {
	size int64
	refs int
}

func newBudget(limit int) *budget { return &budget{max: int64(limit), ids: map[string]*held{}} }

// take counts a send of body k of size bytes for id; it reports false, counting nothing, when
// that would take id beyond the budget.
func (b *budget) take(id string, k bodyKey, size int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.ids[id]
	if h == nil {
		h = &held{bodies: map[bodyKey]*heldBody{}}
		b.ids[id] = h
	}
	if body := h.bodies[k]; body != nil {
		body.refs++
		return true
	}
	if h.total+int64(size) > b.max {
		if h.total == 0 {
			delete(b.ids, id)
		}
		return false
	}
	h.bodies[k] = &heldBody{size: int64(size), refs: 1}
	h.total += int64(size)
	return true
}

// give ends one send of body k for id.
func (b *budget) give(id string, k bodyKey) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.ids[id]
	if h == nil || h.bodies[k] == nil {
		return
	}
	body := h.bodies[k]
	if body.refs--; body.refs > 0 {
		return
	}
	delete(h.bodies, k)
	if h.total -= body.size; h.total <= 0 {
		delete(b.ids, id)
	}
}

// inFlight returns the bytes id has in flight.
func (b *budget) inFlight(id string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h := b.ids[id]; h != nil {
		return h.total
	}
	return 0
}
