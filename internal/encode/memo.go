package encode

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/routeset"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/internal/snapshot"
)

// Memo holds one scope's last encoding: the resources of every listener (its head and its route
// sets), cluster and secret, by the IR value (pointer) they encode. snapshot.CompileScope with a
// snapshot.Memo hands back the very same IR values for what did not change, so encoding the next
// snapshot of the scope encodes only what changed and hashes only that: of a listener that
// changed, its head when that changed and the route sets whose routes changed; when nothing
// changed it returns the previous Encoded itself. A Memo belongs to one scope (it holds the
// scope's private keys in wire form) and must never encode another. IR values must not be
// modified once encoded.
type Memo struct {
	listeners map[string]*listenerEncoding
	clusters  map[*snapshot.Cluster]*discoveryv1.Resource
	secrets   map[*snapshot.Secret]*discoveryv1.Resource
	last      *Encoded
}

// listenerEncoding is the encoding of one listener: its head resource and its route sets, in
// key order.
type listenerEncoding struct {
	ir      *snapshot.Listener
	head    *discoveryv1.Listener
	headRes *discoveryv1.Resource
	sets    []*setEncoding
	// vhosts holds each virtual host's sets in the order of its Hosts (hostname order).
	vhosts map[string][]*setEncoding
}

// setEncoding is one route set: the IR routes it encodes, their wire form and its resource.
type setEncoding struct {
	id groupID
	// group is the IR value encoded: a compile with a memo hands back the same one while its
	// routes stay the same.
	group  *snapshot.HostRoutes
	key    string
	routes []*snapshot.Route
	wire   []*discoveryv1.Route
	res    *discoveryv1.Resource
}

// NewMemo returns an empty Memo.
func NewMemo() *Memo { return &Memo{} }

// Snapshot encodes s as Snapshot does, reusing the resources of the IR values the previous
// encoding with m saw. On error m is left as it was.
func (m *Memo) Snapshot(s *snapshot.Snapshot) (*Encoded, error) {
	listeners := make(map[string]*listenerEncoding, len(s.Listeners))
	next := Memo{
		clusters: make(map[*snapshot.Cluster]*discoveryv1.Resource, len(s.Clusters)),
		secrets:  make(map[*snapshot.Secret]*discoveryv1.Resource, len(s.Secrets)),
	}
	// In key order, so that the snapshot need not sort them: certificates, clusters, listeners,
	// then route sets, listener by listener (no listener name holds routeset.Separator, so the
	// sets of two listeners never interleave).
	resources := make([]*discoveryv1.Resource, 0, len(s.Listeners)+len(s.Clusters)+len(s.Secrets))
	reused := 0
	var err error
	for _, c := range s.Secrets {
		if resources, reused, err = reuseOrEncode(resources, reused, m.secrets, next.secrets, c, CertificateKeyPrefix+c.Name, func() proto.Message { return Certificate(c) }); err != nil {
			return nil, fmt.Errorf("encode %s: %w", s.Scope, err)
		}
	}
	for _, c := range s.Clusters {
		if resources, reused, err = reuseOrEncode(resources, reused, m.clusters, next.clusters, c, ClusterKeyPrefix+c.Name, func() proto.Message { return Cluster(c) }); err != nil {
			return nil, fmt.Errorf("encode %s: %w", s.Scope, err)
		}
	}
	encoded := make([]*listenerEncoding, 0, len(s.Listeners))
	for _, l := range s.Listeners {
		le, n, err := m.listener(l)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", s.Scope, err)
		}
		listeners[l.Name] = le
		encoded = append(encoded, le)
		reused += n
		resources = append(resources, le.headRes)
	}
	slices.SortFunc(encoded, func(a, b *listenerEncoding) int {
		return strings.Compare(a.ir.Name+routeset.Separator, b.ir.Name+routeset.Separator)
	})
	for _, le := range encoded {
		for _, se := range le.sets {
			resources = append(resources, se.res)
		}
	}
	next.listeners = listeners
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

// listener returns the encoding of l and how many of its resources the previous encoding made:
// all of them when l is the IR value encoded last; otherwise the head when it encodes alike, and
// each route set whose group is the one encoded before, or whose routes are the very routes of
// the set of that virtual host and hostname before. A changed set takes the wire form of its
// routes from the set before. Each virtual host's groups and sets are both in hostname order,
// so they are matched by one walk over both, without a lookup per set.
func (m *Memo) listener(l *snapshot.Listener) (*listenerEncoding, int, error) {
	old := m.listeners[l.Name]
	if old != nil && old.ir == l {
		return old, 1 + len(old.sets), nil
	}
	out := &listenerEncoding{ir: l, head: listenerHead(l), vhosts: make(map[string][]*setEncoding, len(l.VirtualHosts))}
	reused := 0
	if old != nil && proto.Equal(old.head, out.head) {
		out.headRes = old.headRes
		reused++
	} else {
		r, err := cache.NewResource(ListenerKeyPrefix+l.Name, out.head)
		if err != nil {
			return nil, 0, err
		}
		out.headRes = r
	}
	byVirtualHost := make([][]*setEncoding, 0, len(l.VirtualHosts))
	for _, vh := range l.VirtualHosts {
		var before []*setEncoding
		if old != nil {
			before = old.vhosts[vh.Name]
		}
		hosts := vh.Hosts()
		sets := make([]*setEncoding, 0, len(hosts))
		for _, h := range hosts {
			for len(before) > 0 && before[0].id.hostname < h.Hostname {
				before = before[1:]
			}
			var prev *setEncoding
			if len(before) > 0 && before[0].id.hostname == h.Hostname {
				prev, before = before[0], before[1:]
			}
			if prev != nil && prev.group == h {
				sets = append(sets, prev)
				reused++
				continue
			}
			g := &routeGroup{groupID: groupID{vh.Name, h.Hostname}, routes: h.Routes}
			if prev != nil {
				g.key = prev.key
			} else {
				g.key = routeset.Key(l.Name, vh.Name, h.Hostname)
			}
			se, err := encodeSet(l, g, prev)
			if err != nil {
				return nil, 0, err
			}
			if se == prev {
				reused++
				cp := *prev // the same resource, kept under the new group
				se = &cp
			}
			se.group = h
			sets = append(sets, se)
		}
		out.vhosts[vh.Name] = sets
		byVirtualHost = append(byVirtualHost, sets)
	}
	out.sets = mergeByKey(byVirtualHost)
	return out, reused, nil
}

// mergeByKey merges lists of sets, each in key order, into one in key order.
func mergeByKey(lists [][]*setEncoding) []*setEncoding {
	if len(lists) == 1 {
		return lists[0]
	}
	n := 0
	for _, l := range lists {
		n += len(l)
	}
	out := make([]*setEncoding, 0, n)
	for len(out) < n {
		best := -1
		for i, l := range lists {
			if len(l) > 0 && (best < 0 || l[0].key < lists[best][0].key) {
				best = i
			}
		}
		out = append(out, lists[best][0])
		lists[best] = lists[best][1:]
	}
	return out
}

// encodeSet returns prev when it encodes the group's very routes, else a new encoding that takes
// from prev the wire form of the routes it had.
func encodeSet(l *snapshot.Listener, g *routeGroup, prev *setEncoding) (*setEncoding, error) {
	if prev != nil && slices.Equal(prev.routes, g.routes) {
		return prev, nil
	}
	var known map[*snapshot.Route]*discoveryv1.Route
	if prev != nil {
		known = make(map[*snapshot.Route]*discoveryv1.Route, len(prev.routes))
		for i, r := range prev.routes {
			known[r] = prev.wire[i]
		}
	}
	msg := routeSet(l, g, func(r *snapshot.Route) *discoveryv1.Route {
		if w, ok := known[r]; ok {
			return w
		}
		return route(r)
	})
	res, err := cache.NewResource(g.key, msg)
	if err != nil {
		return nil, err
	}
	return &setEncoding{id: g.groupID, key: g.key, routes: g.routes, wire: msg.GetRoutes(), res: res}, nil
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
