package router

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"testing"
	"time"
)

// The views below render a table as plain values, so tables built different ways compare
// with cmp: routes are named by their position in their virtual host, which also checks that
// the indexes hold the routes of the route list and nothing else.

type tableView struct {
	Ports    []portView
	Clusters map[string]clusterView
	Skipped  []string
}

type clusterView struct {
	Endpoints []Endpoint
	H2C       bool
}

type portView struct {
	Number    uint32
	Protocol  Protocol
	Listeners []string
	VHosts    []vhostView
	Hosts     map[string]string
	Default   string
}

type vhostView struct {
	Name, Listener, Hostname string
	Certificates             []string
	Routes                   []routeView
	Index                    map[string]pathView
	Refs                     map[string]int
}

type pathView struct {
	Exact, Prefix map[string][]int
	Regex         []int
	PrefixLens    [4]uint64
}

type matchView struct {
	Kind               MatchKind
	Name, Value, Regex string
}

type routeView struct {
	Name, Hostname, Method          string
	Path                            matchView
	Headers, Query                  []matchView
	RequestHeaders, ResponseHeaders []HeaderModifier
	Rewrite                         *Rewrite
	Redirect                        *Redirect
	Mirrors                         []string
	DirectStatus                    int
	Backends                        []string
	TotalWeight                     uint64
	RequestTimeout, BackendTimeout  time.Duration
	Refs                            []string
}

func viewOf(t *Table) tableView {
	out := tableView{Clusters: map[string]clusterView{}, Skipped: t.Skipped}
	for _, cl := range t.clusters {
		if cl != nil {
			out.Clusters[cl.Name] = clusterView{Endpoints: cl.Endpoints, H2C: cl.H2C}
		}
	}
	for _, p := range t.Ports() {
		pv := portView{Number: p.Number, Protocol: p.Protocol, Listeners: p.Listeners, Hosts: map[string]string{}}
		for _, vh := range p.vhosts {
			pv.VHosts = append(pv.VHosts, viewOfVHost(vh))
		}
		eachHost(&p.hosts, func(pattern string, vh *VirtualHost) { pv.Hosts[pattern] = vh.Listener + "/" + vh.Name })
		if p.defaultHost != nil {
			pv.Default = p.defaultHost.Listener + "/" + p.defaultHost.Name
		}
		out.Ports = append(out.Ports, pv)
	}
	return out
}

func eachHost[T any](h *hostIndex[T], f func(pattern string, v T)) {
	for name, v := range h.exact {
		f(name, v)
	}
	for suffix, v := range h.wild {
		f("*"+suffix, v)
	}
	if h.hasAny {
		f("", h.any)
	}
}

func viewOfVHost(vh *VirtualHost) vhostView {
	out := vhostView{Name: vh.Name, Listener: vh.Listener, Hostname: vh.Hostname, Index: map[string]pathView{}, Refs: vh.refs}
	for _, c := range vh.Certificates {
		sum := sha256.Sum256(c.TLS.Certificate[0])
		out.Certificates = append(out.Certificates, c.Name+"@"+hex.EncodeToString(sum[:4]))
	}
	pos := map[*Route]int{}
	for i, r := range vh.routes {
		pos[r] = i
		out.Routes = append(out.Routes, viewOfRoute(r))
	}
	at := func(rs []*Route) []int {
		var out []int
		for _, r := range rs {
			i, ok := pos[r]
			if !ok {
				i = -1 // a route the route list does not hold
			}
			out = append(out, i)
		}
		return out
	}
	eachHost(&vh.hosts, func(pattern string, pi *pathIndex) {
		v := pathView{Exact: map[string][]int{}, Prefix: map[string][]int{}, Regex: at(pi.regex), PrefixLens: pi.prefixLens}
		for k, rs := range pi.exact {
			v.Exact[k] = at(rs)
		}
		for k, rs := range pi.prefix {
			v.Prefix[k] = at(rs)
		}
		out.Index[pattern] = v
	})
	return out
}

func viewOfMatch(m valueMatch) matchView {
	out := matchView{Kind: m.kind, Name: m.name, Value: m.value}
	if m.re != nil {
		out.Regex = m.re.String()
	}
	return out
}

func viewOfRoute(r *Route) routeView {
	out := routeView{
		Name: r.Name, Hostname: r.hostname, Method: r.method, Path: viewOfMatch(r.path),
		Rewrite: r.Rewrite, Redirect: r.Redirect, DirectStatus: r.DirectStatus, TotalWeight: r.totalWeight,
		RequestTimeout: r.RequestTimeout, BackendTimeout: r.BackendTimeout, Refs: r.refs,
	}
	for _, h := range r.headers {
		out.Headers = append(out.Headers, viewOfMatch(h))
	}
	for _, q := range r.query {
		out.Query = append(out.Query, viewOfMatch(q))
	}
	for _, m := range r.RequestHeaders {
		out.RequestHeaders = append(out.RequestHeaders, *m)
	}
	for _, m := range r.ResponseHeaders {
		out.ResponseHeaders = append(out.ResponseHeaders, *m)
	}
	for _, m := range r.Mirrors {
		out.Mirrors = append(out.Mirrors, fmt.Sprintf("%s %d/%d", m.Cluster.Name, m.Numerator, m.Denominator))
	}
	for _, b := range r.Backends {
		name := ""
		if b.Cluster != nil {
			name = b.Cluster.Name
		}
		out.Backends = append(out.Backends, fmt.Sprintf("%s w%d s%d c%d", name, b.Weight, b.ErrorStatus, b.cumulative))
	}
	return out
}

// checkInvariants checks what views cannot: orders rise along each virtual host, and every
// cluster reference points at its cluster's slot.
func checkInvariants(t *testing.T, table *Table) {
	t.Helper()
	for i, cl := range table.clusters {
		if cl == nil {
			continue
		}
		if cl.Index != i || cl.ref == nil || cl.ref.Index != i || cl.ref.Name != cl.Name || table.clusterNames[cl.Name] != cl {
			t.Fatalf("cluster %s in slot %d: index %d, ref %+v", cl.Name, i, cl.Index, cl.ref)
		}
	}
	if n := len(table.clusters); n > 0 && table.clusters[n-1] == nil {
		t.Fatalf("trailing free slot in %d", n)
	}
	ref := func(r *ClusterRef) {
		if r.Index >= len(table.clusters) || table.clusters[r.Index] == nil || table.clusters[r.Index].ref != r {
			t.Fatalf("reference %+v does not point at its cluster", r)
		}
	}
	for _, p := range table.Ports() {
		for _, vh := range p.vhosts {
			if !slices.IsSortedFunc(vh.routes, compareOrder) {
				t.Fatalf("virtual host %s: orders do not rise", vh.Name)
			}
			for i := 1; i < len(vh.routes); i++ {
				if vh.routes[i-1].order == vh.routes[i].order {
					t.Fatalf("virtual host %s: routes %d and %d share an order", vh.Name, i-1, i)
				}
			}
			for _, r := range vh.routes {
				for _, b := range r.Backends {
					if b.Cluster != nil {
						ref(b.Cluster)
					}
				}
				for _, m := range r.Mirrors {
					ref(m.Cluster)
				}
			}
		}
	}
}

func compareOrder(a, b *Route) int {
	switch {
	case a.order < b.order:
		return -1
	case a.order > b.order:
		return 1
	}
	return 0
}
