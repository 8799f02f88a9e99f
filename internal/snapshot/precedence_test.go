package snapshot

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestComparePrecedence(t *testing.T) {
	t.Parallel()
	older := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	newer := older.Add(time.Hour)
	mk := func(host, pathType, path string, mod func(*entry)) entry {
		e := entry{route: &Route{Hostname: host, Match: Match{Path: PathMatch{Type: pathType, Value: path}}}, created: older, routeKey: "ns/r"}
		if mod != nil {
			mod(&e)
		}
		return e
	}
	prefix := func(path string) entry { return mk("", MatchPathPrefix, path, nil) }
	// from is a route of the intersected hostname host whose own hostname is origin.
	from := func(host, origin, pathType, path string, mod func(*entry)) entry {
		return mk(host, pathType, path, func(e *entry) {
			e.origin = origin
			if mod != nil {
				mod(e)
			}
		})
	}
	newerB := func(e *entry) { e.created, e.routeKey = newer, "b/b" }
	tests := []struct {
		name          string
		first, second entry
	}{
		{"an exact hostname beats a wildcard", mk("a.example.com", MatchPathPrefix, "/", nil), mk("*.example.com", MatchExact, "/x", nil)},
		{"a longer exact hostname beats a shorter one", mk("ab.example.com", MatchPathPrefix, "/", nil), mk("a.example.com", MatchPathPrefix, "/", nil)},
		{"a longer wildcard beats a shorter one", mk("*.a.example.com", MatchPathPrefix, "/", nil), mk("*.example.com", MatchPathPrefix, "/", nil)},
		{"any hostname comes last", mk("*.example.com", MatchPathPrefix, "/", nil), prefix("/very/long/path")},
		{
			"of one intersection, an exact route hostname beats a wildcard, though newer",
			from("abc.example.com", "abc.example.com", MatchPathPrefix, "/", newerB), from("abc.example.com", "*.example.com", MatchPathPrefix, "/", nil),
		},
		{
			"of one intersection, an exact route hostname beats a wildcard with a longer prefix",
			from("abc.example.com", "abc.example.com", MatchPathPrefix, "/path", newerB), from("abc.example.com", "*.example.com", MatchPathPrefix, "/path/prefix", nil),
		},
		{
			"of one intersection, an exact route hostname beats a wildcard with an exact path",
			from("abc.example.com", "abc.example.com", MatchPathPrefix, "/", newerB), from("abc.example.com", "*.example.com", MatchExact, "/x", nil),
		},
		{
			"of one intersection, a narrower route wildcard beats a wider one, though newer",
			from("*.example.com", "*.example.com", MatchPathPrefix, "/path", newerB), from("*.example.com", "*.com", MatchPathPrefix, "/path/prefix", nil),
		},
		{
			"of one intersection, a route wildcard beats a route without hostnames",
			from("abc.example.com", "*.com", MatchPathPrefix, "/", newerB), from("abc.example.com", "", MatchExact, "/x", nil),
		},
		{
			"a more specific intersection beats a more specific route hostname",
			from("abc.example.com", "*.example.com", MatchPathPrefix, "/", nil), from("*.example.com", "*.example.com", MatchExact, "/x", nil),
		},
		{
			"of one intersection and route hostname, the older route wins",
			from("abc.example.com", "*.example.com", MatchPathPrefix, "/", nil), from("abc.example.com", "*.example.com", MatchPathPrefix, "/", newerB),
		},
		{"an exact path beats a longer prefix", mk("", MatchExact, "/a", nil), prefix("/a/b/c")},
		{"a regular expression beats a prefix", mk("", MatchRegularExpression, "/.*", nil), prefix("/a/b/c")},
		{"an exact path beats a regular expression", mk("", MatchExact, "/a", nil), mk("", MatchRegularExpression, "/a.*", nil)},
		{"a longer prefix beats a shorter one", prefix("/ab"), prefix("/a")},
		{
			"a method beats headers", mk("", MatchPathPrefix, "/", func(e *entry) { e.route.Match.Method = "GET" }),
			mk("", MatchPathPrefix, "/", func(e *entry) { e.route.Match.Headers = make([]ValueMatch, 3) }),
		},
		{
			"more headers beat fewer", mk("", MatchPathPrefix, "/", func(e *entry) { e.route.Match.Headers = make([]ValueMatch, 2) }),
			mk("", MatchPathPrefix, "/", func(e *entry) { e.route.Match.Headers = make([]ValueMatch, 1) }),
		},
		{
			"headers beat query parameters", mk("", MatchPathPrefix, "/", func(e *entry) { e.route.Match.Headers = make([]ValueMatch, 1) }),
			mk("", MatchPathPrefix, "/", func(e *entry) { e.route.Match.QueryParams = make([]ValueMatch, 2) }),
		},
		{"more query parameters beat fewer", mk("", MatchPathPrefix, "/", func(e *entry) { e.route.Match.QueryParams = make([]ValueMatch, 1) }), prefix("/")},
		{"the older route wins a tie", prefix("/"), mk("", MatchPathPrefix, "/", func(e *entry) { e.created = newer; e.routeKey = "a/a" })},
		{"the first route by namespace/name wins an age tie", mk("", MatchPathPrefix, "/", func(e *entry) { e.routeKey = "a/b" }), mk("", MatchPathPrefix, "/", func(e *entry) { e.routeKey = "b/a" })},
		{"the first rule wins within a route", mk("", MatchPathPrefix, "/", func(e *entry) { e.rule, e.match = 0, 5 }), mk("", MatchPathPrefix, "/", func(e *entry) { e.rule = 1 })},
		{"the first match wins within a rule", mk("", MatchPathPrefix, "/", func(e *entry) { e.match = 0 }), mk("", MatchPathPrefix, "/", func(e *entry) { e.match = 1 })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := comparePrecedence(tt.first, tt.second); got >= 0 {
				t.Errorf("comparePrecedence(first, second) = %d, want < 0", got)
			}
			if got := comparePrecedence(tt.second, tt.first); got <= 0 {
				t.Errorf("comparePrecedence(second, first) = %d, want > 0", got)
			}
		})
	}
}

// Tests that spliceEntries gives the order a full sort gives, for random entries split at random
// between kept, left out and fresh ones, none to all of them fresh, with room in the array or
// without, and hands every left-out one to onDrop.
func TestSpliceEntriesGivesTheOrderOfAFullSort(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 11))
	hosts := []string{"", "a.example.com", "b.example.com", "*.example.com", "ab.example.com"}
	types := []string{MatchExact, MatchPathPrefix, MatchRegularExpression}
	for round := range 500 {
		n := rng.IntN(40)
		all := make([]entry, n)
		for i := range all {
			all[i] = entry{
				route:    &Route{Hostname: hosts[rng.IntN(len(hosts))], Match: Match{Path: PathMatch{Type: types[rng.IntN(len(types))], Value: strings.Repeat("/x", rng.IntN(4))}}},
				created:  time.Unix(int64(rng.IntN(3)), 0),
				routeKey: fmt.Sprintf("ns/r%d", i), // distinct, so the order is total
			}
		}
		var prev, fresh, want []entry
		dropped := map[string]bool{}
		for _, e := range all {
			switch rng.IntN(5) {
			case 0:
				fresh = append(fresh, e)
				want = append(want, e)
			case 1:
				prev = append(prev, e)
				dropped[e.routeKey] = true
			default:
				prev = append(prev, e)
				want = append(want, e)
			}
		}
		slices.SortFunc(prev, comparePrecedence)
		slices.SortFunc(fresh, comparePrecedence)
		slices.SortFunc(want, comparePrecedence)
		if round%2 == 0 {
			prev = slices.Grow(prev, rng.IntN(8)) // room for some of the fresh ones, or all
		}
		handed := 0
		got := spliceEntries(prev, fresh, func(e *entry) bool { return dropped[e.routeKey] }, func(e entry) {
			if !dropped[e.routeKey] {
				t.Errorf("round %d: %s handed to onDrop, not left out", round, e.routeKey)
			}
			handed++
		})
		if !slices.EqualFunc(got, want, func(a, b entry) bool { return a.routeKey == b.routeKey }) {
			t.Fatalf("round %d: spliceEntries of %d previous entries (%d left out) and %d fresh differs from a full sort", round, len(prev), len(dropped), len(fresh))
		}
		if handed != len(dropped) {
			t.Fatalf("round %d: %d entries handed to onDrop, want %d", round, handed, len(dropped))
		}
	}
}
