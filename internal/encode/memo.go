package encode

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/internal/snapshot"
)

// Memo holds one scope's last encoding: the resource of every listener, cluster and secret, by
// the IR value (pointer) it encodes. snapshot.CompileScope with a snapshot.Memo hands back the
// very same IR values for what did not change, so encoding the next snapshot of the scope
// encodes only what changed and hashes only that; when nothing changed it returns the previous
// Encoded itself. A Memo belongs to one scope (it holds the scope's private keys in wire form)
// and must never encode another. IR values must not be modified once encoded.
type Memo struct {
	// routes are the wire form of the routes of the listeners encoded last, by listener name
	// and route: a changed listener re-encodes only its new routes.
	routes    map[string]map[*snapshot.Route]*discoveryv1.Route
	listeners map[*snapshot.Listener]*discoveryv1.Resource
	clusters  map[*snapshot.Cluster]*discoveryv1.Resource
	secrets   map[*snapshot.Secret]*discoveryv1.Resource
	last      *Encoded
}

// NewMemo returns an empty Memo.
func NewMemo() *Memo { return &Memo{} }

// Snapshot encodes s as Snapshot does, reusing the resources of the IR values the previous
// encoding with m saw. On error m is left as it was.
func (m *Memo) Snapshot(s *snapshot.Snapshot) (*Encoded, error) {
	next := Memo{
		routes:    make(map[string]map[*snapshot.Route]*discoveryv1.Route, len(m.routes)),
		listeners: make(map[*snapshot.Listener]*discoveryv1.Resource, len(s.Listeners)),
		clusters:  make(map[*snapshot.Cluster]*discoveryv1.Resource, len(s.Clusters)),
		secrets:   make(map[*snapshot.Secret]*discoveryv1.Resource, len(s.Secrets)),
	}
	resources := make([]*discoveryv1.Resource, 0, len(s.Listeners)+len(s.Clusters)+len(s.Secrets))
	reused := 0
	var err error
	for _, l := range s.Listeners {
		if _, ok := m.listeners[l]; ok {
			next.routes[l.Name] = m.routes[l.Name]
		}
		if resources, reused, err = reuseOrEncode(resources, reused, m.listeners, next.listeners, l, ListenerKeyPrefix+l.Name, func() proto.Message { return m.listener(l, next.routes) }); err != nil {
			return nil, fmt.Errorf("encode %s: %w", s.Scope, err)
		}
	}
	for _, c := range s.Clusters {
		if resources, reused, err = reuseOrEncode(resources, reused, m.clusters, next.clusters, c, ClusterKeyPrefix+c.Name, func() proto.Message { return Cluster(c) }); err != nil {
			return nil, fmt.Errorf("encode %s: %w", s.Scope, err)
		}
	}
	for _, c := range s.Secrets {
		if resources, reused, err = reuseOrEncode(resources, reused, m.secrets, next.secrets, c, CertificateKeyPrefix+c.Name, func() proto.Message { return Certificate(c) }); err != nil {
			return nil, fmt.Errorf("encode %s: %w", s.Scope, err)
		}
	}
	if m.last != nil && m.last.Scope == Scope(s.Scope) && reused == len(resources) && reused == len(m.last.Resources) {
		next.last = m.last
		*m = next
		return m.last, nil
	}
	var prev *cache.Snapshot
	if m.last != nil {
		prev = m.last.Snapshot
	}
	versioned, err := cache.NewSnapshotReusing(prev, resources, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", s.Scope, err)
	}
	next.last = &Encoded{Scope: Scope(s.Scope), Resources: versioned.Resources(), Version: versioned.Version(), Snapshot: versioned}
	*m = next
	return next.last, nil
}

// reuseOrEncode appends the resource of v: the one the previous encoding made of v, or a new one.
func reuseOrEncode[T any](out []*discoveryv1.Resource, reused int, prev, next map[*T]*discoveryv1.Resource, v *T, key string, msg func() proto.Message) ([]*discoveryv1.Resource, int, error) {
	if r, ok := prev[v]; ok {
		next[v] = r
		return append(out, r), reused + 1, nil
	}
	r, err := cache.NewResource(key, msg())
	if err != nil {
		return out, reused, err
	}
	next[v] = r
	return append(out, r), reused, nil
}

// listener is Listener, taking the wire form of every route the previous encoding of the
// listener of the same name had from it, and recording every route's in next.
func (m *Memo) listener(l *snapshot.Listener, next map[string]map[*snapshot.Route]*discoveryv1.Route) *discoveryv1.Listener {
	prev := m.routes[l.Name]
	cur := make(map[*snapshot.Route]*discoveryv1.Route, len(prev))
	next[l.Name] = cur
	return encodeListener(l, func(r *snapshot.Route) *discoveryv1.Route {
		out, ok := prev[r]
		if !ok {
			out = route(r)
		}
		cur[r] = out
		return out
	})
}
