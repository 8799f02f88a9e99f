package router

import (
	"bytes"
	"cmp"
	"errors"
	"hash/maphash"
	"slices"

	"google.golang.org/protobuf/proto"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
)

// patchRoutes gives out, whose src and spans are set, the routes they encode, reusing the
// routes of prev. The routes whose encoding starts and ends both lists are kept; between them,
// the longest run of routes prev had in the same order is kept too, and the others are taken
// from prev with a new order when prev had the same encoding, else compiled, and get orders
// between their neighbours'. A kept route naming a cluster that came or went is recompiled in
// its place. The indexes are edited for the routes that changed, copy on write. ok is false
// when a route does not decode.
func (c *compiler) patchRoutes(out, prev *VirtualHost) (ok bool, err error) {
	nPrev, nOut := len(prev.routes), len(out.spans)
	head := 0
	for head < min(nPrev, nOut) && bytes.Equal(prev.rawRoute(head), out.rawRoute(head)) {
		head++
	}
	tail := 0
	for tail < min(nPrev, nOut)-head && bytes.Equal(prev.rawRoute(nPrev-1-tail), out.rawRoute(nOut-1-tail)) {
		tail++
	}
	p := patch{c: c, prev: prev, out: out, routes: make([]*Route, nOut), fresh: make([]bool, nOut)}
	copy(p.routes, prev.routes[:head])
	copy(p.routes[nOut-tail:], prev.routes[nPrev-tail:])
	if !p.middle(head, nOut-tail, nPrev-tail) {
		return false, nil
	}
	if c.clusterMoved(prev.refs) {
		for i, r := range p.routes {
			if p.fresh[i] || !c.routeMoved(r) {
				continue
			}
			p.removed = append(p.removed, r)
			if !p.compile(i, r.order) {
				return false, nil
			}
		}
	}
	if err := errors.Join(p.errs...); err != nil {
		return true, err
	}
	out.routes = p.routes
	var added []*Route
	for i, r := range p.routes {
		if p.fresh[i] {
			added = append(added, r)
		}
	}
	if p.renumber || len(added)+len(p.removed) > len(p.routes)/2 {
		out.reindex(p.renumber)
		return true, nil
	}
	out.hosts = editHosts(prev.hosts, p.removed, added)
	out.refs = editRefs(prev.refs, p.removed, added)
	return true, nil
}

// patch is the state of one patchRoutes.
type patch struct {
	c        *compiler
	prev     *VirtualHost
	out      *VirtualHost
	routes   []*Route
	fresh    []bool // routes[i] is not one of prev's routes
	removed  []*Route
	errs     []error
	renumber bool
}

// middle fills routes[from:to], which replace prev's routes[from:prevTo]: the longest run of
// prev's routes found there in the same order keeps its routes and orders, and the routes
// between get orders spaced between their neighbours', or the virtual host is marked for
// renumbering when there is no room.
func (p *patch) middle(from, to, prevTo int) bool {
	at := p.match(from, to, prevTo)
	keep := rising(at)
	kept := make(map[int]bool, len(at))
	lo := int64(0)
	if from > 0 {
		lo = p.routes[from-1].order
	}
	for i := 0; i < len(at); {
		if keep[i] {
			r := p.prev.routes[at[i]]
			p.routes[from+i], kept[at[i]] = r, true
			lo, i = r.order, i+1
			continue
		}
		j := i
		for j < len(at) && !keep[j] {
			j++
		}
		if !p.fill(from, i, j, at, lo) {
			return false
		}
		i = j
	}
	for i := from; i < prevTo; i++ {
		if !kept[i] {
			p.removed = append(p.removed, p.prev.routes[i])
		}
	}
	return true
}

// match returns, for each of routes[from:to], the index of a route of prev.routes[from:prevTo]
// with the same encoding, each used once, or -1.
func (p *patch) match(from, to, prevTo int) []int {
	at := make([]int, to-from)
	n := max(prevTo-from, 0)
	seed := maphash.MakeSeed()
	first := make(map[uint64]int, n) // by hash, the first of prev's routes with that hash
	next := make([]int, n)           // the next route with the same hash, or -1
	for i := prevTo - 1; i >= from; i-- {
		h := maphash.Bytes(seed, p.prev.rawRoute(i))
		next[i-from] = -1
		if j, ok := first[h]; ok {
			next[i-from] = j
		}
		first[h] = i
	}
	used := make([]bool, n)
	for i := range at {
		at[i] = -1
		b := p.out.rawRoute(from + i)
		j, ok := first[maphash.Bytes(seed, b)]
		for ; ok && j >= 0; j = next[j-from] {
			if !used[j-from] && bytes.Equal(p.prev.rawRoute(j), b) {
				at[i], used[j-from] = j, true
				break
			}
		}
	}
	return at
}

// fill gives routes[from+i:from+j], none of them kept, orders spaced between lo and the order
// of the route that follows them.
func (p *patch) fill(from, i, j int, at []int, lo int64) bool {
	step := int64(orderGap)
	switch {
	case j < len(at):
		step = (p.prev.routes[at[j]].order - lo) / int64(j-i+1)
	case from+j < len(p.routes):
		step = (p.routes[from+j].order - lo) / int64(j-i+1)
	}
	if step < 1 {
		p.renumber, step = true, 0
	}
	for x := i; x < j; x++ {
		order := lo + int64(x-i+1)*step
		if at[x] >= 0 && !p.c.routeMoved(p.prev.routes[at[x]]) {
			moved := *p.prev.routes[at[x]]
			moved.order = order
			p.routes[from+x], p.fresh[from+x] = &moved, true
			continue
		}
		if !p.compile(from+x, order) {
			return false
		}
	}
	return true
}

// rising marks a longest strictly rising run, not necessarily contiguous, of the values of at
// that are not -1.
func rising(at []int) []bool {
	var tails []int // tails[k]: the index in at ending the rising run of length k+1 with the least value
	link := make([]int, len(at))
	for i, v := range at {
		if v < 0 {
			continue
		}
		k, _ := slices.BinarySearchFunc(tails, v, func(t, v int) int { return cmp.Compare(at[t], v) })
		link[i] = -1
		if k > 0 {
			link[i] = tails[k-1]
		}
		if k == len(tails) {
			tails = append(tails, i)
		} else {
			tails[k] = i
		}
	}
	keep := make([]bool, len(at))
	if len(tails) > 0 {
		for i := tails[len(tails)-1]; i >= 0; i = link[i] {
			keep[i] = true
		}
	}
	return keep
}

// compile decodes and compiles route i; it reports false when the route does not decode.
func (p *patch) compile(i int, order int64) bool {
	var in discoveryv1.Route
	if !decodes(p.out.rawRoute(i), &in) {
		return false
	}
	r, err := p.c.route(&in)
	if err != nil {
		p.errs = append(p.errs, err)
		r = &Route{}
	}
	r.order = order
	p.routes[i], p.fresh[i] = r, true
	return true
}

// decodes says whether b decodes into m; the callers that get false decode the whole payload
// again, which gives the error.
func decodes(b []byte, m proto.Message) bool { return proto.Unmarshal(b, m) == nil }

// reindex builds the virtual host's indexes from its routes, first giving every route the
// order of a fresh compile when renumber is set; a route shared with another table is copied
// rather than changed.
func (vh *VirtualHost) reindex(renumber bool) {
	vh.hosts, vh.refs = newHostIndex[*pathIndex](), map[string]int{}
	for i, r := range vh.routes {
		if want := int64(i+1) * orderGap; renumber && r.order != want {
			moved := *r
			moved.order = want
			r = &moved
			vh.routes[i] = r
		}
		vh.index(r)
	}
}

// clusterMoved says whether a cluster counted in refs came or went.
func (c *compiler) clusterMoved(refs map[string]int) bool {
	if len(c.moved) == 0 {
		return false
	}
	for name := range c.moved {
		if refs[name] > 0 {
			return true
		}
	}
	return false
}

// routeMoved says whether a cluster r names came or went.
func (c *compiler) routeMoved(r *Route) bool {
	return len(c.moved) > 0 && slices.ContainsFunc(r.refs, func(name string) bool { return c.moved[name] })
}
