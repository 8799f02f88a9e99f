package stream

import (
	"sync"
	"time"

	"coxswain.dev/coxswain/discovery/server/cache"
)

// convergence times each snapshot version from its Set in the cache to the acknowledgement of
// the last live stream of its scope. It follows the newest version acknowledged in each scope
// and counts the live streams that hold it; a stream that leaves no longer counts, so a version
// converges when every stream still connected has acknowledged it. A version superseded before
// that, or that a live proxy refuses, is not observed.
type convergence struct {
	// observe receives each converged version, its scope and when its last stream
	// acknowledged it.
	observe func(scope cache.Scope, snap *cache.Snapshot, lastAck time.Time)

	mu     sync.Mutex
	scopes map[cache.Scope]*progress
	// held is the snapshot each live session acknowledged last.
	held map[*session]*cache.Snapshot
}

// progress is the convergence of one scope.
type progress struct {
	scope cache.Scope
	// streams counts the live streams of the scope.
	streams int
	// snap is the version followed, nil until the scope's first acknowledgement; acked counts
	// the live streams holding it, lastAck is when the latest of them acknowledged it, and done
	// says it was observed.
	snap    *cache.Snapshot
	acked   int
	lastAck time.Time
	done    bool
}

func newConvergence(observe func(scope cache.Scope, snap *cache.Snapshot, lastAck time.Time)) *convergence {
	return &convergence{observe: observe, scopes: make(map[cache.Scope]*progress), held: make(map[*session]*cache.Snapshot)}
}

// join counts a registered session.
func (c *convergence) join(sess *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.scopes[sess.scope]
	if p == nil {
		p = &progress{scope: sess.scope}
		c.scopes[sess.scope] = p
	}
	p.streams++
}

// leave forgets a session that ended; the version followed converges if it was the last one
// missing it.
func (c *convergence) leave(sess *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.scopes[sess.scope]
	if p == nil {
		return
	}
	if held, ok := c.held[sess]; ok && held == p.snap {
		p.acked--
	}
	delete(c.held, sess)
	if p.streams--; p.streams == 0 {
		delete(c.scopes, sess.scope)
		return
	}
	c.check(p)
}

// ack records that sess acknowledged snap at now; current is the scope's snapshot in the cache.
// The first acknowledgement of the current version makes it the one followed.
func (c *convergence) ack(sess *session, snap, current *cache.Snapshot, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.scopes[sess.scope]
	if p == nil {
		return
	}
	if c.held[sess] == p.snap && p.snap != nil {
		p.acked--
	}
	c.held[sess] = snap
	if snap != p.snap {
		if snap != current {
			return
		}
		p.snap, p.acked, p.done = snap, 0, false
	}
	p.acked++
	p.lastAck = now
	c.check(p)
}

func (c *convergence) check(p *progress) {
	if p.done || p.snap == nil || p.acked < p.streams {
		return
	}
	p.done = true
	c.observe(p.scope, p.snap, p.lastAck)
}
