package graph

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// RuleMemo holds the resolved rules of every HTTPRoute of the last Build that used it, so that
// the next Build resolves again only the routes marked with RouteChanged. The caller vouches that
// nothing else a route's rules read changed: a change to a Service a route references must mark
// that route, and a change to ReferenceGrants or BackendTLSPolicies needs Reset. The Rules of a
// Graph built with a memo are shared with the graphs built after it and must not be modified.
type RuleMemo struct {
	routes map[types.NamespacedName]*resolvedRules
	dirty  map[types.NamespacedName]bool
	// build counts the Builds; every route a Build uses is stamped with it, and finishRules
	// drops the others.
	build uint64
}

type resolvedRules struct {
	build        uint64
	rules        []*Rule
	invalid      *metav1.Condition
	resolvedRefs metav1.Condition
	clusters     []ClusterKey
}

// NewRuleMemo returns an empty RuleMemo.
func NewRuleMemo() *RuleMemo {
	return &RuleMemo{routes: map[types.NamespacedName]*resolvedRules{}, dirty: map[types.NamespacedName]bool{}}
}

// RouteChanged marks a route as created, changed or deleted, or as referencing a Service that was.
func (m *RuleMemo) RouteChanged(key types.NamespacedName) { m.dirty[key] = true }

// Reset forgets every route.
func (m *RuleMemo) Reset() {
	clear(m.routes)
	clear(m.dirty)
}

// rules sets r's rules: from the memo when it holds them and r is not marked, resolved
// otherwise. The clusters the rules use are recorded either way.
func (b *builder) rules(r *HTTPRoute) {
	m := b.opts.Rules
	if m == nil {
		b.buildRules(r)
		return
	}
	key := r.Key()
	rr, ok := m.routes[key]
	if !ok || m.dirty[key] {
		b.buildRules(r)
		rr = &resolvedRules{rules: r.Rules, invalid: r.invalid, resolvedRefs: r.resolvedRefs, clusters: usedClusters(r.Rules)}
		m.routes[key] = rr
	}
	rr.build = m.build + 1
	r.Rules, r.invalid, r.resolvedRefs = rr.rules, rr.invalid, rr.resolvedRefs
	for _, k := range rr.clusters {
		b.clusters[k] = true
	}
}

// finishRules makes the routes of this Build the memo.
func (b *builder) finishRules() {
	if m := b.opts.Rules; m != nil {
		m.build++
		for key, rr := range m.routes {
			if rr.build != m.build {
				delete(m.routes, key)
			}
		}
		clear(m.dirty)
	}
}

// usedClusters returns the clusters of the valid backends and mirrors of rules.
func usedClusters(rules []*Rule) []ClusterKey {
	var out []ClusterKey
	for _, rule := range rules {
		for _, f := range rule.Filters {
			if f.Mirror != nil {
				out = append(out, f.Mirror.Cluster)
			}
		}
		for _, be := range rule.Backends {
			if be.Valid {
				out = append(out, be.Cluster)
			}
		}
	}
	return out
}
