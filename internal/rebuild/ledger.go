package rebuild

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/stream"
	"coxswain.dev/coxswain/internal/graph"
)

// maxLedgerVersions caps the versions one scope remembers, whatever the streams hold: a proxy
// that many rebuilds behind is judged not to have applied what it has (Pending, never Programmed
// on a wrong version), and the ledger of a busy shared pool stays small.
const maxLedgerVersions = 64

// generation names one generation of one Gateway object: a Gateway deleted and created again
// under its name starts over at 1, and its uid tells the two apart.
type generation struct {
	uid types.UID
	gen int64
}

// ledger remembers, per scope, which Gateway generations each published snapshot version holds,
// so that an ACK of a version (a content hash, which says nothing of order) can be turned into
// "this proxy applied generation N of that Gateway". A version holds generation N when a rebuild
// that saw generation N compiled the scope to it; a later version holds it too, as the rebuilds
// that made it saw N or newer. It is safe for concurrent use: rebuilds record, the status
// writer asks.
type ledger struct {
	mu     sync.Mutex
	scopes map[cache.Scope]*scopeLedger
}

// scopeLedger is one scope's versions. seq counts the rebuilds that recorded the scope.
type scopeLedger struct {
	seq      uint64
	current  string
	versions map[string]*versionRecord
}

// versionRecord is what one version holds: the generations of the scope's Gateways at the
// latest rebuild that compiled the scope to it (seq).
type versionRecord struct {
	seq      uint64
	gateways map[types.NamespacedName]generation
}

// record notes that a rebuild compiled scope, serving gateways, to version. A version seen
// again (an unchanged scope, or content that came back) takes the generations of this rebuild:
// its content is what they compile to.
func (l *ledger) record(scope cache.Scope, version string, gateways []*graph.Gateway) {
	gens := make(map[types.NamespacedName]generation, len(gateways))
	for _, gw := range gateways {
		gens[gw.Key()] = generation{uid: gw.Source.UID, gen: gw.Source.Generation}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.scopes == nil {
		l.scopes = map[cache.Scope]*scopeLedger{}
	}
	sl := l.scopes[scope]
	if sl == nil {
		sl = &scopeLedger{versions: map[string]*versionRecord{}}
		l.scopes[scope] = sl
	}
	sl.seq++
	sl.current = version
	sl.versions[version] = &versionRecord{seq: sl.seq, gateways: gens}
}

// prune drops the versions of scope older than the oldest one held (acknowledged, refused or
// in flight) by a live stream of its, as held lists them, and the oldest beyond
// maxLedgerVersions; the current version always stays. Versions a stream may still answer are
// kept, so an answer is never of an unknown version unless it is of one no stream held when the
// scope was last recorded, or of one that many rebuilds old.
func (l *ledger) prune(scope cache.Scope, held []stream.ProxyState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sl := l.scopes[scope]
	if sl == nil {
		return
	}
	oldest := sl.versions[sl.current].seq
	for _, p := range held {
		for _, v := range []string{p.Acked, p.Nacked, p.InFlight} {
			switch rec := sl.versions[v]; {
			case v == "":
			case rec == nil:
				oldest = 0 // older than every version remembered: keep them all, up to the cap
			case rec.seq < oldest:
				oldest = rec.seq
			}
		}
	}
	oldest = max(oldest, sl.seq-min(sl.seq, maxLedgerVersions-1))
	for v, rec := range sl.versions {
		if rec.seq < oldest {
			delete(sl.versions, v)
		}
	}
}

// forget drops a scope no longer served.
func (l *ledger) forget(scope cache.Scope) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.scopes, scope)
}

// holds reports whether version of scope holds generation gen (or a newer one) of the Gateway
// key of uid.
func (l *ledger) holds(scope cache.Scope, version string, key types.NamespacedName, uid types.UID, gen int64) bool {
	if version == "" {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	sl := l.scopes[scope]
	if sl == nil {
		return false
	}
	rec := sl.versions[version]
	if rec == nil {
		return false
	}
	g, ok := rec.gateways[key]
	return ok && g.uid == uid && g.gen >= gen
}

// versions returns how many versions of scope are remembered, for tests.
func (l *ledger) versions(scope cache.Scope) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if sl := l.scopes[scope]; sl != nil {
		return len(sl.versions)
	}
	return 0
}
