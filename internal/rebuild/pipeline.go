package rebuild

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/stream"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/identity/trustbundle"
	"coxswain.dev/coxswain/internal/scopeauth"
	"coxswain.dev/coxswain/internal/state"
)

// StatusWriter writes the status of a graph; status.Writer is one.
type StatusWriter interface {
	Write(ctx context.Context, cs *state.ClusterState, g *graph.Graph) (int, error)
}

// Pipeline turns cluster state into what the discovery server serves. Cache, Authority and
// IsLeader are required; Status and TrustCopies may be nil.
type Pipeline struct {
	Graph     graph.Options
	Cache     *cache.Cache
	Authority *scopeauth.Authority
	Status    StatusWriter
	// IsLeader reports whether this replica writes status.
	IsLeader func() bool
	// TrustCopies, when set, is told on the leader which namespaces run a dedicated proxy and so
	// need a copy of the trust bundle.
	TrustCopies TrustCopier
	// Metrics, when set, records the size of every snapshot published; the caller, who knows
	// what triggered a rebuild, records its duration there.
	Metrics *Metrics
	// SharedPoolLimits, when set, is asked at every rebuild for Graph's
	// MaxSharedGatewaysPerNamespace and MaxSharedPortsPerNamespace (the CoxswainConfig's
	// sharedPool).
	SharedPoolLimits func() (gateways, ports int32)
	// ListenerLimits, when set, is asked at every rebuild for Graph's ListenerLimits (the
	// CoxswainConfig's listenerSets).
	ListenerLimits func() graph.ListenerLimits
	// MaxRouteBytesPerNamespace, when set, is asked at every rebuild for Graph's
	// MaxRouteBytesPerNamespace (the CoxswainConfig's snapshots).
	MaxRouteBytesPerNamespace func() int64
	// TrustAnyEndpointSlice, when set, is asked at every rebuild for Graph's
	// TrustAnyEndpointSlice (the CoxswainConfig's backends.endpointSlices is Any).
	TrustAnyEndpointSlice func() bool
	// Proxies, when set, lists what the live streams of a scope on this replica last answered
	// (discoveryserver.Runner.Proxies): Applied judges from it, and every rebuild records which
	// Gateway generations each version it publishes holds.
	Proxies func(cache.Scope) []stream.ProxyState

	scopes      map[cache.Scope]bool
	inc         incremental
	ledger      ledger
	lastTrust   []trustbundle.Target
	trustSynced bool
	// scopeHook, when set, runs at the start of every scope's compile, inside the boundary
	// that turns a panic into that scope's failure (tests make scopes fail with it).
	scopeHook func(cache.Scope)
	// graphHook, when set, is given every graph a rebuild builds (tests read it).
	graphHook func(*graph.Graph)
	// status writes status in the background once RunStatus runs; until then Rebuild writes it
	// itself.
	status atomic.Pointer[statusLoop]
}

// RunStatus writes status in the background until ctx ends: from then on a rebuild on the
// leader hands its graph over and returns as soon as its snapshots are published. Start it
// before the first rebuild, at most once.
func (p *Pipeline) RunStatus(ctx context.Context) {
	if p.Status == nil {
		return
	}
	l := newStatusLoop(p.Status)
	p.status.Store(l)
	defer p.status.Store(nil)
	l.run(ctx)
}

// StatusSettled reports whether the background status writes have caught up with the latest
// rebuild, and how many objects they have patched so far. Without RunStatus it is always
// settled.
func (p *Pipeline) StatusSettled() (bool, int) {
	if l := p.status.Load(); l != nil {
		return l.idle()
	}
	return true, 0
}

// Result says what a rebuild changed.
type Result struct {
	// Scopes are every scope served, sorted; Changed and Removed those whose snapshot was
	// replaced or deleted.
	Scopes, Changed, Removed []cache.Scope
	// Versions holds the new version of every Changed scope.
	Versions map[cache.Scope]string
	// Failed are the scopes whose compile or encode failed, with why; each keeps publishing
	// the snapshot it had (if any), and every other scope is published as usual.
	Failed []ScopeFailure
	// AuthorityChanged is true when some Gateway's expected ServiceAccount changed.
	AuthorityChanged bool
	// StatusWritten counts the objects whose status was patched, when the rebuild wrote status
	// itself (not with RunStatus, where the writes happen later).
	StatusWritten int
}

// Rebuild runs the pipeline: graph, snapshots, encoding, then the scope authority (whose hooks
// close the streams it no longer allows), the discovery cache (deleting the scopes that vanished)
// and, on the leader, status. The authority comes first so that a stream revoked by this
// rebuild is closed before the content it may no longer see is published. Rebuilds must not run
// concurrently.
func (p *Pipeline) Rebuild(ctx context.Context, in Input) (Result, error) {
	opts := p.Graph
	if in.CRDBundleVersion != "" {
		opts.CRDBundleVersion = in.CRDBundleVersion
	}
	if in.CRDChannel != "" {
		opts.CRDChannel = in.CRDChannel
	}
	if p.TrustAnyEndpointSlice != nil {
		opts.TrustAnyEndpointSlice = p.TrustAnyEndpointSlice()
	}
	if p.SharedPoolLimits != nil {
		opts.MaxSharedGatewaysPerNamespace, opts.MaxSharedPortsPerNamespace = p.SharedPoolLimits()
	}
	if p.ListenerLimits != nil {
		opts.ListenerLimits = p.ListenerLimits()
	}
	if p.MaxRouteBytesPerNamespace != nil {
		opts.MaxRouteBytesPerNamespace = p.MaxRouteBytesPerNamespace()
	}
	_, span := phase(ctx, "graph")
	changes := p.inc.prepare(in.State, opts)
	opts.Routes = p.inc.routes
	g := graph.Build(in.State, opts)
	if p.graphHook != nil {
		p.graphHook(g)
	}
	span.SetAttributes(attribute.Int("coxswain.gateways", len(g.Gateways)))
	span.End()
	_, span = phase(ctx, "compile")
	encoded, failed := p.inc.encode(g, changes, p.scopeHook)
	p.inc.seen = p.inc.seen.update(in.State, opts, changes)
	span.SetAttributes(attribute.Int("coxswain.scopes", len(encoded)), attribute.Int("coxswain.scopes_failed", len(failed)))
	span.End()
	p.Metrics.observeFailures(failed)
	p.Metrics.observeScopes(p.inc.sizes, g.SizeRefusals)
	_, span = phase(ctx, "authority")
	authorityChanged := p.Authority.Update(g)
	span.End()
	_, span = phase(ctx, "publish")
	res, err := p.publish(ctx, encoded, failed, in.ChangedAt)
	span.SetAttributes(attribute.Int("coxswain.scopes_changed", len(res.Changed)), attribute.Int("coxswain.scopes_removed", len(res.Removed)))
	span.End()
	res.AuthorityChanged = authorityChanged
	if err != nil {
		return res, err
	}
	if !p.IsLeader() {
		p.trustSynced = false // a future leader term starts from what the cluster holds
		return res, nil
	}
	if p.TrustCopies != nil {
		if err := p.syncTrust(ctx, g); err != nil {
			return res, fmt.Errorf("copy trust bundle to dedicated proxies' namespaces: %w", err)
		}
	}
	if p.Status == nil {
		return res, nil
	}
	if l := p.status.Load(); l != nil {
		l.offer(in.State, g)
		return res, nil
	}
	_, span = phase(ctx, "status")
	res.StatusWritten, err = p.Status.Write(ctx, in.State, g)
	span.SetAttributes(attribute.Int("coxswain.status_written", res.StatusWritten))
	span.End()
	if err != nil {
		return res, fmt.Errorf("write status: %w", err)
	}
	return res, nil
}

// publish sets the snapshot of every scope encoded anew in the cache and deletes the scopes set
// before but served no more. A scope whose encoding is the one already published costs nothing
// (its version was not computed again either); a scope that failed keeps what it had. When ctx
// carries a recording span (the rebuild's), each new snapshot keeps it, so that its convergence
// is traced under it, and the span gets an event per version published.
func (p *Pipeline) publish(ctx context.Context, encoded []scopeEncoding, failed []ScopeFailure, changedAt time.Time) (Result, error) {
	res := Result{Failed: failed}
	rebuildSpan := trace.SpanFromContext(ctx)
	traced := rebuildSpan.IsRecording()
	if p.scopes == nil {
		p.scopes = map[cache.Scope]bool{}
	}
	next := make(map[cache.Scope]bool, len(encoded)+len(failed))
	for _, f := range failed {
		next[f.Scope] = true
	}
	for _, se := range encoded {
		e := se.Encoded
		res.Scopes = append(res.Scopes, e.Scope)
		next[e.Scope] = true
		// The ledger learns a version before any stream can send it, so no ACK is of a
		// version it does not know.
		p.recordVersion(se)
		if se.Unchanged && p.scopes[e.Scope] {
			continue
		}
		p.scopes[e.Scope] = true
		e.Snapshot.SetChangedAt(changedAt)
		if traced {
			e.Snapshot.SetTraceContext(ctx)
		}
		changed, err := p.Cache.SetSnapshot(e.Scope, e.Snapshot)
		if err != nil {
			return res, fmt.Errorf("set snapshot of %s: %w", e.Scope, err)
		}
		if changed {
			res.Changed = append(res.Changed, e.Scope)
			if res.Versions == nil {
				res.Versions = map[cache.Scope]string{}
			}
			res.Versions[e.Scope] = e.Version
			p.Metrics.observeSnapshot(e.Scope, e.Snapshot)
			if traced {
				rebuildSpan.AddEvent("published", trace.WithAttributes(
					attribute.String("coxswain.scope", e.Scope.String()), attribute.String("coxswain.version", e.Version),
				))
			}
		}
	}
	for _, f := range failed {
		res.Scopes = append(res.Scopes, f.Scope)
	}
	sortScopes(res.Scopes)
	sortScopes(res.Changed)
	for scope := range p.scopes {
		if next[scope] {
			continue
		}
		delete(p.scopes, scope)
		p.ledger.forget(scope)
		if p.Cache.Delete(scope) {
			res.Removed = append(res.Removed, scope)
		}
	}
	sortScopes(res.Removed)
	return res, nil
}

// recordVersion notes in the ledger which Gateway generations the version of se holds, and
// drops the versions no live stream of its scope holds any more.
func (p *Pipeline) recordVersion(se scopeEncoding) {
	if p.Proxies == nil {
		return
	}
	p.ledger.record(se.Scope, se.Version, se.Gateways)
	p.ledger.prune(se.Scope, p.Proxies(se.Scope))
}

func sortScopes(s []cache.Scope) {
	slices.SortFunc(s, func(a, b cache.Scope) int { return strings.Compare(a.String(), b.String()) })
}
