package graph

import (
	"cmp"
	"slices"
	"strings"
)

// Hostnames in this package are lower case (the CRDs enforce it). The empty string stands for
// "any host": a listener or route without hostnames.

// IsWildcard reports whether h is a wildcard hostname such as "*.example.com".
func IsWildcard(h string) bool {
	return strings.HasPrefix(h, "*.")
}

// HostnameMatches reports whether pattern covers host. A wildcard pattern matches any host that
// ends with its suffix and has at least one more label ("*.example.com" matches "a.example.com"
// and "a.b.example.com", not "example.com"); host may itself be a wildcard.
func HostnameMatches(pattern, host string) bool {
	switch {
	case pattern == "" || pattern == host:
		return true
	case host == "" || !IsWildcard(pattern):
		return false
	}
	suffix := pattern[1:]
	return strings.HasSuffix(host, suffix) && len(host) > len(suffix)
}

// IntersectHostname returns the most specific hostname that both a listener and a route
// hostname cover, and false when they are disjoint.
func IntersectHostname(listener, route string) (string, bool) {
	switch {
	case HostnameMatches(listener, route):
		return route, true
	case HostnameMatches(route, listener):
		return listener, true
	}
	return "", false
}

// AttachedHostname is one hostname a route answers to on a listener.
type AttachedHostname struct {
	// Hostname is the listener's and the route's hostname intersected: the hostname requests
	// are matched against.
	Hostname string
	// Route is the route's own hostname that gives Hostname, the most specific one when several
	// do; empty when the route has no hostnames. Routes whose intersections are the same take
	// precedence by it (GatewayRouteHostnameIntersectionPrecedence): on a listener for
	// "abc.example.com", a route for "abc.example.com" comes before one for "*.example.com".
	Route string
}

// IntersectHostnames returns the hostnames a route answers to on a listener, sorted by
// Hostname, one per Hostname: the listener's hostname when the route has none, otherwise every
// non-empty intersection. It returns nil when no route hostname intersects the listener's.
func IntersectHostnames(listener string, route []string) []AttachedHostname {
	if len(route) == 0 {
		return []AttachedHostname{{Hostname: listener}}
	}
	var out []AttachedHostname
	for _, h := range route {
		if both, ok := IntersectHostname(listener, h); ok {
			out = append(out, AttachedHostname{Hostname: both, Route: h})
		}
	}
	// Sorting by Hostname, then by the most specific Route, keeps the most specific origin of
	// each intersection first for Compact.
	slices.SortFunc(out, func(a, b AttachedHostname) int {
		return cmp.Or(strings.Compare(a.Hostname, b.Hostname), CompareHostnameSpecificity(a.Route, b.Route))
	})
	return slices.CompactFunc(out, func(a, b AttachedHostname) bool { return a.Hostname == b.Hostname })
}

// CompareHostnameSpecificity orders hostnames from the most to the least specific, the order in
// which a request's host selects a listener: exact names first, then wildcards with more labels
// after the wildcard, then the empty hostname. Ties break by length, then lexically.
func CompareHostnameSpecificity(a, b string) int {
	return cmp.Or(
		cmp.Compare(hostnameRank(b), hostnameRank(a)),
		cmp.Compare(strings.Count(b, "."), strings.Count(a, ".")),
		cmp.Compare(len(b), len(a)),
		strings.Compare(a, b),
	)
}

func hostnameRank(h string) int {
	switch {
	case h == "":
		return 0
	case IsWildcard(h):
		return 1
	}
	return 2
}
