package snapshot

import (
	"cmp"
	"hash/maphash"
	"strings"
	"time"

	"coxswain.dev/coxswain/internal/graph"
)

// entry is a compiled route with the keys that order it among the routes of a virtual host.
type entry struct {
	route *Route
	// origin is the route's own hostname that gave route.Hostname, empty when it has none.
	origin   string
	created  time.Time
	routeKey string
	rule     int
	match    int
	// grpc is set for the entries of a GRPCRoute, which are ordered by their own keys.
	grpc *grpcRank
	// keyHash and hostHash are hashes of routeKey and route.Hostname (see hashed), which the
	// memo compares before the strings when it looks for a few keys or hostnames among every
	// entry of a virtual host: most routes' keys and hostnames have the same length, so their
	// strings compare byte by byte.
	keyHash, hostHash uint64
}

// hashSeed seeds the hashes of entries.
var hashSeed = maphash.MakeSeed()

func stringHash(s string) uint64 { return maphash.String(hashSeed, s) }

// hashed returns e with its hashes set.
func (e entry) hashed() entry {
	e.keyHash, e.hostHash = stringHash(e.routeKey), stringHash(e.route.Hostname)
	return e
}

// grpcRank holds what orders a GRPCRoute match: the characters of its service and method.
type grpcRank struct{ service, method int }

// comparePrecedence orders routes so that the first one matching a request is the one the
// Gateway API spec gives precedence to:
//
//  1. the longest matching non-wildcard hostname, then the longest hostname, and when the
//     listener and route hostnames intersect to the same hostname, the same two on the route's
//     own hostname (GatewayRouteHostnameIntersectionPrecedence): on a listener for
//     "abc.example.com", a route for "abc.example.com" before one for "*.example.com", before
//     one for "*.com", before one without hostnames;
//  2. Exact path, then RegularExpression path (implementation-specific; longer pattern first),
//     then PathPrefix with the most characters;
//  3. a method match;
//  4. the most header matches, then the most query parameter matches;
//  5. the oldest route, then the route first in namespace/name order;
//  6. within a route, the first rule, then the first match.
//
// GRPCRoute entries come after the HTTPRoute entries of equal hostname keys (the two kinds never
// share a hostname on a listener, so this only makes the order total) and replace 2 to 4 with
// the spec's GRPCRoute keys: the most characters in the service, then in the method, then the
// most header matches.
func comparePrecedence(a, b entry) int {
	// Each key is compared only when the ones before it tie: this runs O(n log n) times per
	// virtual host, and cmp.Or would evaluate every key, the tie-breaks' string comparisons
	// included, on every call.
	if c := cmp.Compare(exactHostLen(b.route.Hostname), exactHostLen(a.route.Hostname)); c != 0 {
		return c
	}
	if c := cmp.Compare(len(b.route.Hostname), len(a.route.Hostname)); c != 0 {
		return c
	}
	if c := cmp.Compare(exactHostLen(b.origin), exactHostLen(a.origin)); c != 0 {
		return c
	}
	if c := cmp.Compare(len(b.origin), len(a.origin)); c != 0 {
		return c
	}
	if c := cmp.Compare(boolRank(a.grpc != nil), boolRank(b.grpc != nil)); c != 0 {
		return c
	}
	ma, mb := &a.route.Match, &b.route.Match
	if a.grpc != nil {
		if c := cmp.Compare(b.grpc.service, a.grpc.service); c != 0 {
			return c
		}
		if c := cmp.Compare(b.grpc.method, a.grpc.method); c != 0 {
			return c
		}
	} else {
		if c := cmp.Compare(pathRank(mb.Path.Type), pathRank(ma.Path.Type)); c != 0 {
			return c
		}
		if c := cmp.Compare(len(mb.Path.Value), len(ma.Path.Value)); c != 0 {
			return c
		}
		if c := cmp.Compare(boolRank(mb.Method != ""), boolRank(ma.Method != "")); c != 0 {
			return c
		}
	}
	if c := cmp.Compare(len(mb.Headers), len(ma.Headers)); c != 0 {
		return c
	}
	if a.grpc == nil {
		if c := cmp.Compare(len(mb.QueryParams), len(ma.QueryParams)); c != 0 {
			return c
		}
	}
	return compareOrigin(&a, &b)
}

// compareOrigin breaks ties: the oldest route, the first by name, its first rule and match.
func compareOrigin(a, b *entry) int {
	if c := a.created.Compare(b.created); c != 0 {
		return c
	}
	if c := strings.Compare(a.routeKey, b.routeKey); c != 0 {
		return c
	}
	if c := cmp.Compare(a.rule, b.rule); c != 0 {
		return c
	}
	if c := cmp.Compare(a.match, b.match); c != 0 {
		return c
	}
	return strings.Compare(a.route.Hostname, b.route.Hostname)
}

func exactHostLen(h string) int {
	if graph.IsWildcard(h) {
		return 0
	}
	return len(h)
}

func pathRank(t string) int {
	switch t {
	case MatchExact:
		return 2
	case MatchRegularExpression:
		return 1
	}
	return 0
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}
