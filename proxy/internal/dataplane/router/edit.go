package router

import (
	"cmp"
	"maps"
	"slices"
)

// editHosts returns a copy of h with removed taken out of and added put into the path indexes
// of their hostnames, each touched path index copied first; h is not changed.
func editHosts(h hostIndex[*pathIndex], removed, added []*Route) hostIndex[*pathIndex] {
	out := h.clone()
	touched := map[string]*pathEdit{}
	edit := func(host string) *pathEdit {
		e, ok := touched[host]
		if !ok {
			pi, had := out.get(host)
			if had {
				pi = pi.clone()
			} else {
				pi = newPathIndex()
			}
			e = &pathEdit{pi: pi}
			touched[host] = e
		}
		return e
	}
	for _, r := range removed {
		edit(r.hostname).remove(r)
	}
	for _, r := range added {
		edit(r.hostname).pi.insert(r)
	}
	for host, e := range touched {
		if e.pi.empty() {
			out.del(host)
			continue
		}
		if e.prefixGone {
			e.pi.countPrefixLens()
		}
		out.set(host, e.pi)
	}
	return out
}

func editRefs(refs map[string]int, removed, added []*Route) map[string]int {
	out := maps.Clone(refs)
	if out == nil {
		out = map[string]int{}
	}
	for _, r := range removed {
		for _, name := range r.refs {
			if out[name]--; out[name] <= 0 {
				delete(out, name)
			}
		}
	}
	for _, r := range added {
		for _, name := range r.refs {
			out[name]++
		}
	}
	return out
}

// clone returns a copy of pi whose buckets can be replaced without changing pi.
func (pi *pathIndex) clone() *pathIndex {
	return &pathIndex{exact: maps.Clone(pi.exact), prefix: maps.Clone(pi.prefix), regex: pi.regex, prefixLens: pi.prefixLens}
}

func (pi *pathIndex) empty() bool {
	return len(pi.exact) == 0 && len(pi.prefix) == 0 && len(pi.regex) == 0
}

// insert puts r into its bucket at its order's place; the bucket is copied, not changed.
func (pi *pathIndex) insert(r *Route) {
	switch r.path.kind {
	case MatchExact:
		pi.exact[r.path.value] = withRoute(pi.exact[r.path.value], r)
	case MatchPrefix:
		pi.prefix[r.path.value] = withRoute(pi.prefix[r.path.value], r)
		n := min(len(r.path.value), 255)
		pi.prefixLens[n>>6] |= 1 << (n & 63)
	default:
		pi.regex = withRoute(pi.regex, r)
	}
}

// countPrefixLens sets prefixLens from the prefixes held.
func (pi *pathIndex) countPrefixLens() {
	pi.prefixLens = [4]uint64{}
	for p := range pi.prefix {
		n := min(len(p), 255)
		pi.prefixLens[n>>6] |= 1 << (n & 63)
	}
}

// pathEdit is a path index being edited; prefixGone says a prefix left it, so its prefixLens
// must be counted again.
type pathEdit struct {
	pi         *pathIndex
	prefixGone bool
}

// remove takes r out of its bucket; the bucket is copied, not changed.
func (e *pathEdit) remove(r *Route) {
	pi := e.pi
	switch r.path.kind {
	case MatchExact:
		if rs := withoutRoute(pi.exact[r.path.value], r); len(rs) > 0 {
			pi.exact[r.path.value] = rs
		} else {
			delete(pi.exact, r.path.value)
		}
	case MatchPrefix:
		if rs := withoutRoute(pi.prefix[r.path.value], r); len(rs) > 0 {
			pi.prefix[r.path.value] = rs
		} else {
			delete(pi.prefix, r.path.value)
			e.prefixGone = true
		}
	default:
		pi.regex = withoutRoute(pi.regex, r)
	}
}

// withRoute returns a copy of rs, which is in order, with r at its order's place.
func withRoute(rs []*Route, r *Route) []*Route {
	i, _ := slices.BinarySearchFunc(rs, r.order, func(x *Route, o int64) int { return cmp.Compare(x.order, o) })
	out := make([]*Route, 0, len(rs)+1)
	out = append(out, rs[:i]...)
	out = append(out, r)
	return append(out, rs[i:]...)
}

// withoutRoute returns a copy of rs without r, nil when nothing is left.
func withoutRoute(rs []*Route, r *Route) []*Route {
	if len(rs) <= 1 {
		if len(rs) == 1 && rs[0] != r {
			return rs
		}
		return nil
	}
	out := make([]*Route, 0, len(rs)-1)
	for _, x := range rs {
		if x != r {
			out = append(out, x)
		}
	}
	return out
}
