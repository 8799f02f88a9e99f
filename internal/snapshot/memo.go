package snapshot

import (
	"maps"
	"reflect"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"coxswain.dev/coxswain/internal/graph"
)

// Memo holds what the last CompileScope of one scope produced, so that the next compile of the
// same scope reuses what did not change: the compiled routes of every route not marked with
// RouteChanged, spliced into their virtual host's precedence order instead of sorting it again,
// each virtual host's routes grouped by hostname (VirtualHost.Hosts) with the groups a change
// did not touch kept, and the very same VirtualHost, HostRoutes, Listener, Cluster and Secret
// values (pointers) wherever the result is equal, which lets the encoder skip them. A Memo
// belongs to one scope: it holds that scope's key material and must never be used to compile
// another.
//
// The caller vouches that nothing but the marked routes changed what the graph says about
// routes: a change to a Gateway, listener, Service, ReferenceGrant, Namespace, Secret or anything
// else a route's resolution reads needs a new Memo. Endpoints may change freely (a cluster is
// compiled again unless it is the very graph cluster compiled last time, which graph's
// RouteMemo hands on only while its objects stay the same), and so may the set of routes. After a
// compile that did not finish (a panic), discard the Memo.
type Memo struct {
	// dirty holds the IDs (graph.HTTPRoute.ID) of the routes marked changed.
	dirty     map[string]bool
	vhosts    map[string]*vhostMemo
	listeners map[string]*Listener
	clusters  map[string]*Cluster
	// fromGraph holds each cluster by the graph cluster it was compiled from (see
	// compiledCluster).
	fromGraph map[*graph.Cluster]*Cluster
	secrets   map[string]*Secret
	// next collects this compile's results; finish makes them the memo.
	next memoNext
	// scopeClusters counts, for every cluster, the remembered virtual hosts whose routes use it,
	// as counted holds them: the scope's clusters without a walk over every virtual host's.
	scopeClusters map[string]int
	counted       map[string]countedClusters
	// clustersIDs numbers the cluster counts compileRoutes makes, so that counted can tell them
	// apart.
	clustersIDs uint64
}

// countedClusters is the cluster count of a virtual host that scopeClusters includes.
type countedClusters struct {
	id       uint64
	clusters map[string]int
}

type memoNext struct {
	// dirtyKeys lists the routes marked changed when they are few (see isDirty), and
	// dirtyHashes their hashes.
	dirtyKeys   []string
	dirtyHashes []uint64
	vhosts      map[string]*vhostMemo
	dups        map[string]bool
	listeners   map[string]*Listener
	clusters    map[string]*Cluster
	fromGraph   map[*graph.Cluster]*Cluster
	secrets     map[string]*Secret
}

// vhostMemo is one compiled virtual host with its routes' entries in precedence order, the
// routes attached and the clusters their entries use, each with the number of uses.
type vhostMemo struct {
	vh      *VirtualHost
	entries []entry
	// keys are the IDs of the routes attached, sorted, but for the GRPCRoutes, of which grpc
	// counts those attached: GRPCRoutes are compiled again whenever the virtual host is, as an
	// HTTPRoute's change may make one win or lose a hostname (see graph's kind conflicts).
	keys []string
	grpc int
	// hosts groups the entries' routes by hostname (VirtualHost.Hosts).
	hosts    []*HostRoutes
	clusters map[string]int
	// clustersID numbers clusters (see Memo.clustersIDs).
	clustersID uint64
}

// NewMemo returns an empty Memo: its first compile compiles everything.
func NewMemo() *Memo {
	return &Memo{
		dirty:     map[string]bool{},
		vhosts:    map[string]*vhostMemo{},
		listeners: map[string]*Listener{},
		clusters:  map[string]*Cluster{},
		fromGraph: map[*graph.Cluster]*Cluster{},
		secrets:   map[string]*Secret{},

		scopeClusters: map[string]int{},
		counted:       map[string]countedClusters{},
	}
}

// RouteChanged marks an HTTPRoute as created, changed or deleted since the last compile, so that
// the next compile compiles it again wherever it is attached. (A GRPCRoute's change needs a new
// Memo.)
func (m *Memo) RouteChanged(key types.NamespacedName) { m.dirty[key.String()] = true }

func (m *Memo) begin() {
	if m.next.vhosts == nil {
		m.next = memoNext{
			vhosts:    make(map[string]*vhostMemo, len(m.vhosts)),
			dups:      map[string]bool{},
			listeners: make(map[string]*Listener, len(m.listeners)),
			clusters:  make(map[string]*Cluster, len(m.clusters)),
			fromGraph: make(map[*graph.Cluster]*Cluster, len(m.fromGraph)),
			secrets:   make(map[string]*Secret, len(m.secrets)),
		}
		if len(m.dirty) <= graph.FewMarks {
			m.next.dirtyKeys = slices.Collect(maps.Keys(m.dirty))
			for _, k := range m.next.dirtyKeys {
				m.next.dirtyHashes = append(m.next.dirtyHashes, stringHash(k))
			}
		}
	}
}

// finish makes this compile's results the memo, dropping what it no longer produced.
func (m *Memo) finish(*scopeBuilder) {
	if m == nil {
		return
	}
	m.begin()
	m.vhosts, m.listeners, m.clusters, m.fromGraph, m.secrets = m.next.vhosts, m.next.listeners, m.next.clusters, m.next.fromGraph, m.next.secrets
	m.next = memoNext{}
	clear(m.dirty)
}

// virtualHost fills vh's routes from l's attachments, compiling only the routes the memo does
// not hold, and returns the previous virtual host itself when nothing changed.
func (m *Memo) virtualHost(sb *scopeBuilder, vh *VirtualHost, l *graph.Listener) *VirtualHost {
	m.begin()
	key := l.Gateway.Key().String() + "/" + l.QualifiedName()
	if _, dup := m.next.vhosts[key]; dup || m.next.dups[key] {
		// Two listeners of one Gateway by the same name (not expected): neither is remembered.
		m.next.dups[key] = true
		m.count(key, nil)
		return m.uncached(sb, vh, l, key)
	}
	prev := m.vhosts[key]
	var cur *vhostMemo
	if prev != nil && m.unchanged(prev, l) {
		cur = prev
	} else if cur = m.compileRoutes(sb, prev, l); cur == nil {
		m.count(key, nil)
		return m.uncached(sb, vh, l, key)
	}
	m.count(key, cur)
	sb.noteClientCertificates(cur.clusters)
	if cur.vh == nil || !sameVirtualHost(cur.vh, vh) {
		if cur == prev {
			cur = &vhostMemo{entries: prev.entries, keys: prev.keys, grpc: prev.grpc, hosts: prev.hosts, clusters: prev.clusters, clustersID: prev.clustersID}
		}
		vh.Routes, vh.hosts = routesOf(cur.entries), cur.hosts
		cur.vh = vh
	}
	m.next.vhosts[key] = cur
	return cur.vh
}

// unchanged reports whether a virtual host's routes are the ones prev holds: none of the
// routes it had is marked changed, and it has as many as before. A route that came or went
// without being marked is impossible (attachment depends on the route, which would be marked,
// and on the Gateway, whose change drops the whole memo), so counting is enough.
func (m *Memo) unchanged(prev *vhostMemo, l *graph.Listener) bool {
	if len(l.Routes) != len(prev.keys)+prev.grpc {
		return false
	}
	if len(m.dirty) == 0 {
		return true
	}
	for key := range m.dirty {
		if _, found := slices.BinarySearch(prev.keys, key); found {
			return false
		}
	}
	// A marked route that attaches now and did not before, while a GRPCRoute it conflicts with
	// left, keeps the count.
	for _, att := range l.Routes {
		if m.isDirty(att.Route.ID()) {
			return false
		}
	}
	return true
}

// compileRoutes compiles the attachments of l that prev does not hold, or holds for a route
// marked changed, and merges them with the entries of the others. It returns nil when a route
// attaches twice.
//
// With prev, the work grows with the virtual host's routes only by walks that neither hash nor
// allocate per route (see isDirty): the attachments of the marked routes are compiled, placed
// among the kept entries by binary search, and the marked routes' old entries left out.
func (m *Memo) compileRoutes(sb *scopeBuilder, prev *vhostMemo, l *graph.Listener) *vhostMemo {
	if prev == nil {
		return m.compileAll(sb, l)
	}
	var fresh []*graph.Attachment
	var freshKeys []string
	n, grpc := 0, 0
	for _, att := range l.Routes {
		// An HTTPRoute that is not marked is one prev holds: attaching depends on the route,
		// which would be marked, on the Gateway, whose change drops the whole memo, and on
		// GRPCRoutes, which an HTTPRoute never loses a hostname to but by its own change or
		// theirs (which drops the memo too). The count of keys below checks it.
		switch key := att.Route.ID(); {
		case att.Route.GRPC != nil:
			grpc++
		case m.isDirty(key):
			freshKeys = append(freshKeys, key)
		default:
			continue
		}
		fresh = append(fresh, att)
		n += attachmentEntries(att)
	}
	slices.Sort(freshKeys)
	if hasDuplicate(freshKeys) {
		return nil // not expected: a route attaches once per listener
	}
	var keys []string
	if len(m.dirty) > len(m.next.dirtyKeys) {
		keys = make([]string, 0, len(prev.keys)+len(freshKeys))
		for _, k := range prev.keys {
			if !m.dirty[k] {
				keys = append(keys, k)
			}
		}
	} else {
		// In prev's array, as the entries below: each marked key found by binary search.
		keys = prev.keys
		for _, k := range m.next.dirtyKeys {
			if i, found := slices.BinarySearch(keys, k); found {
				keys = slices.Delete(keys, i, i+1)
			}
		}
	}
	keys = mergeSorted(keys, freshKeys)
	if len(keys)+grpc != len(l.Routes) {
		return m.compileAll(sb, l) // a route came or went unmarked (not expected)
	}
	entries := make([]entry, 0, n)
	for _, att := range fresh {
		entries = sb.compileAttachment(entries, att, l)
	}
	cur := &vhostMemo{keys: keys, grpc: grpc, clusters: maps.Clone(prev.clusters)}
	for _, e := range entries {
		clustersOf(e, func(c string) { cur.clusters[c]++ })
	}
	slices.SortFunc(entries, comparePrecedence)
	hosts := make([]string, 0, len(entries))
	for _, e := range entries {
		hosts = append(hosts, e.route.Hostname)
	}
	// In prev's array: nothing but this memo holds it, and prev is dropped (a compile that does
	// not finish drops the whole memo).
	cur.entries = spliceEntries(prev.entries, entries, func(e *entry) bool { return e.grpc != nil || m.isDirtyEntry(e) }, func(e entry) {
		hosts = append(hosts, e.route.Hostname)
		clustersOf(e, func(c string) {
			if cur.clusters[c]--; cur.clusters[c] == 0 {
				delete(cur.clusters, c)
			}
		})
	})
	slices.Sort(hosts)
	cur.hosts = regroupHosts(prev.hosts, cur.entries, slices.Compact(hosts))
	m.clustersIDs++
	cur.clustersID = m.clustersIDs
	return cur
}

// compileAll compiles every attachment of l. It returns nil when a route attaches twice.
func (m *Memo) compileAll(sb *scopeBuilder, l *graph.Listener) *vhostMemo {
	keys := make([]string, 0, len(l.Routes))
	n, grpc := 0, 0
	for _, att := range l.Routes {
		if att.Route.GRPC != nil {
			grpc++ // counted apart (see vhostMemo.keys)
		} else {
			keys = append(keys, att.Route.ID())
		}
		n += attachmentEntries(att)
	}
	if !slices.IsSorted(keys) {
		slices.Sort(keys)
	}
	if hasDuplicate(keys) {
		return nil // not expected: a route attaches once per listener
	}
	entries := make([]entry, 0, n)
	for _, att := range l.Routes {
		entries = sb.compileAttachment(entries, att, l)
	}
	slices.SortFunc(entries, comparePrecedence)
	cur := &vhostMemo{keys: keys, grpc: grpc, entries: entries, hosts: groupHosts(routesOf(entries)), clusters: map[string]int{}}
	for _, e := range entries {
		clustersOf(e, func(c string) { cur.clusters[c]++ })
	}
	m.clustersIDs++
	cur.clustersID = m.clustersIDs
	return cur
}

// isDirty reports whether the route of ID key is marked changed. With few marked, as after an
// edit, it compares key with each of them rather than hashing it: it runs for every route and
// entry of a changed virtual host.
func (m *Memo) isDirty(key string) bool {
	if len(m.dirty) > len(m.next.dirtyKeys) {
		return m.dirty[key]
	}
	return slices.Contains(m.next.dirtyKeys, key)
}

// isDirtyEntry reports whether the route of an entry is marked changed, as isDirty, comparing
// the hashes of the keys first.
func (m *Memo) isDirtyEntry(e *entry) bool {
	if len(m.dirty) > len(m.next.dirtyKeys) {
		return m.dirty[e.routeKey]
	}
	for i, h := range m.next.dirtyHashes {
		if h == e.keyHash && m.next.dirtyKeys[i] == e.routeKey {
			return true
		}
	}
	return false
}

// hasDuplicate reports whether sorted holds a value twice.
func hasDuplicate(sorted []string) bool {
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return true
		}
	}
	return false
}

// mergeSorted merges two sorted slices into a, which has room for b.
func mergeSorted(a, b []string) []string {
	for _, k := range b {
		i, _ := slices.BinarySearch(a, k)
		a = slices.Insert(a, i, k)
	}
	return a
}

// count makes scopeClusters count the clusters of cur for the virtual host key instead of
// those it counted for it before; cur nil counts none.
func (m *Memo) count(key string, cur *vhostMemo) {
	old, had := m.counted[key]
	if had && cur != nil && old.id == cur.clustersID {
		return
	}
	if had {
		for c := range old.clusters {
			if m.scopeClusters[c]--; m.scopeClusters[c] <= 0 {
				delete(m.scopeClusters, c)
			}
		}
		delete(m.counted, key)
	}
	if cur != nil {
		for c := range cur.clusters {
			m.scopeClusters[c]++
		}
		m.counted[key] = countedClusters{id: cur.clustersID, clusters: cur.clusters}
	}
}

// settle stops counting the clusters of the virtual hosts this compile did not remember, before
// the scope's clusters are filled.
func (m *Memo) settle() {
	if m == nil {
		return
	}
	for key := range m.counted {
		if _, ok := m.next.vhosts[key]; !ok {
			m.count(key, nil)
		}
	}
}

// uses reports whether a remembered virtual host of this compile forwards or mirrors to cluster.
func (m *Memo) uses(cluster string) bool { return m != nil && m.scopeClusters[cluster] > 0 }

// clustersOf calls f with every cluster the route of e forwards or mirrors to, once per use.
func clustersOf(e entry, f func(string)) {
	mirrors := func(fs []Filter) {
		for _, fl := range fs {
			if fl.Mirror != nil {
				f(fl.Mirror.Cluster)
			}
		}
	}
	mirrors(e.route.Filters)
	for _, b := range e.route.Backends {
		if b.Cluster != "" {
			f(b.Cluster)
		}
		mirrors(b.Filters)
	}
}

// uncached compiles a virtual host as a compile without a memo does, and remembers nothing of it.
func (m *Memo) uncached(sb *scopeBuilder, vh *VirtualHost, l *graph.Listener, key string) *VirtualHost {
	var entries []entry
	for _, att := range l.Routes {
		entries = sb.compileAttachment(entries, att, l)
	}
	slices.SortFunc(entries, comparePrecedence)
	vh.Routes = routesOf(entries)
	vh.hosts = groupHosts(vh.Routes)
	delete(m.next.vhosts, key)
	return vh
}

// spliceEntries returns entries (sorted) without those drop leaves out, which it hands to
// onDrop, and with fresh (sorted) merged in: comparePrecedence is a total order, so the result
// is the order a full sort gives. It works in entries' array, which it reuses when it has room
// (an edit leaves out as many entries as it brings): the left-out entries are squeezed out in
// one pass, then each fresh entry's place is found by binary search, from the last, and the
// kept entries after it are moved up in one copy, so a change of a few routes compares
// O(log n) times and allocates nothing.
func spliceEntries(entries, fresh []entry, drop func(*entry) bool, onDrop func(entry)) []entry {
	kept := 0
	for i := range entries {
		if drop(&entries[i]) {
			onDrop(entries[i])
			continue
		}
		entries[kept] = entries[i]
		kept++
	}
	clear(entries[kept:]) // no route kept alive by a left-out entry
	entries = slices.Grow(entries[:kept], len(fresh))[:kept+len(fresh)]
	end, w := kept, len(entries)
	for f := len(fresh) - 1; f >= 0; f-- {
		at, _ := slices.BinarySearchFunc(entries[:end], fresh[f], comparePrecedence)
		n := end - at
		copy(entries[w-n:w], entries[at:end])
		w -= n + 1
		entries[w] = fresh[f]
		end = at
	}
	return entries
}

func sameVirtualHost(a, b *VirtualHost) bool {
	return a.Name == b.Name && a.Hostname == b.Hostname && slices.Equal(a.Certificates, b.Certificates)
}

// listener returns the previous listener of the same name when it equals l, l otherwise.
func (m *Memo) listener(l *Listener) *Listener {
	if m == nil {
		return l
	}
	m.begin()
	if prev := m.listeners[l.Name]; prev != nil && prev.Gateway == l.Gateway && prev.Port == l.Port &&
		prev.Protocol == l.Protocol && slices.Equal(prev.VirtualHosts, l.VirtualHosts) &&
		sameClientValidation(prev.ClientValidation, l.ClientValidation) {
		l = prev
	}
	m.next.listeners[l.Name] = l
	return l
}

func sameClientValidation(a, b *graph.FrontendValidation) bool {
	return a == b || (a != nil && b != nil && reflect.DeepEqual(*a, *b))
}

// cluster returns the previous cluster of the same name when it equals c, c otherwise; gc is
// the graph cluster c was compiled from.
func (m *Memo) cluster(gc *graph.Cluster, c *Cluster) *Cluster {
	if m == nil {
		return c
	}
	m.begin()
	if prev := m.clusters[c.Name]; prev != nil && sameCluster(prev, c) {
		c = prev
	}
	m.keepCluster(gc, c)
	return c
}

// compiledCluster returns the cluster the previous compile made of the very graph cluster gc
// when gc has no TLS settings (whose client certificate this compile looks up again), nil
// otherwise. A graph cluster is never modified, and a RouteMemo hands the same one on while
// what it is made of stays the same.
func (m *Memo) compiledCluster(gc *graph.Cluster) *Cluster {
	if m == nil || gc.TLS != nil {
		return nil
	}
	m.begin()
	c := m.fromGraph[gc]
	if c != nil {
		m.keepCluster(gc, c)
	}
	return c
}

func (m *Memo) keepCluster(gc *graph.Cluster, c *Cluster) {
	m.next.clusters[c.Name] = c
	m.next.fromGraph[gc] = c
}

// secret returns the previous secret of the same name when it equals s, s otherwise.
func (m *Memo) secret(s *Secret) *Secret {
	if m == nil {
		return s
	}
	m.begin()
	if prev := m.secrets[s.Name]; prev != nil && sameSecret(prev, s) {
		s = prev
	}
	m.next.secrets[s.Name] = s
	return s
}

func sameCluster(a, b *Cluster) bool {
	return a.Name == b.Name && a.Protocol == b.Protocol && slices.Equal(a.Endpoints, b.Endpoints) &&
		(a.TLS == b.TLS || (a.TLS != nil && b.TLS != nil && reflect.DeepEqual(*a.TLS, *b.TLS))) &&
		sameSecret(a.ClientCertificate, b.ClientCertificate)
}

func sameSecret(a, b *Secret) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Name == b.Name && a.CertificateChain == b.CertificateChain && slices.Equal(a.PrivateKey, b.PrivateKey)
}
