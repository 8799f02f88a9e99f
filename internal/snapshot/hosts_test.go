package snapshot

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// Tests that regroupHosts, given the groups before a change and the hostnames the change
// touched, gives the groups groupHosts gives of the entries after it, keeps the very same group
// for every hostname not touched, and makes every touched one again.
func TestRegroupHostsGivesTheGroupsOfAFullGrouping(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 5))
	for round := range 500 {
		hosts := make([]string, 1+rng.IntN(30))
		for i := range hosts {
			hosts[i] = fmt.Sprintf("h%02d.example.com", rng.IntN(40))
		}
		before := make([]entry, rng.IntN(80))
		for i := range before {
			before[i] = entry{route: &Route{Name: fmt.Sprint(i), Hostname: hosts[rng.IntN(len(hosts))]}}.hashed()
		}
		// The change: some entries dropped, some added, at random places.
		var after []entry
		touched := map[string]bool{}
		drop := 2 + rng.IntN(8) // one in 2 to one in 9, so that at times more than graph.FewMarks hostnames change
		for _, e := range before {
			if rng.IntN(drop) == 0 {
				touched[e.route.Hostname] = true
				continue
			}
			after = append(after, e)
		}
		for range rng.IntN(4) {
			e := entry{route: &Route{Name: "new", Hostname: hosts[rng.IntN(len(hosts))]}}.hashed()
			at := rng.IntN(len(after) + 1)
			after = slices.Insert(after, at, e)
			touched[e.route.Hostname] = true
		}
		changed := make([]string, 0, len(touched))
		for h := range touched {
			changed = append(changed, h)
		}
		slices.Sort(changed)
		prev := groupHosts(routesOf(before))
		got := regroupHosts(prev, after, changed)
		want := groupHosts(routesOf(after))
		if len(got) != len(want) {
			t.Fatalf("round %d: %d groups, want %d", round, len(got), len(want))
		}
		for i := range want {
			if got[i].Hostname != want[i].Hostname || !slices.Equal(got[i].Routes, want[i].Routes) {
				t.Fatalf("round %d: group %d is %s %v, want %s %v", round, i, got[i].Hostname, got[i].Routes, want[i].Hostname, want[i].Routes)
			}
			old := slices.IndexFunc(prev, func(g *HostRoutes) bool { return g.Hostname == want[i].Hostname })
			switch {
			case touched[got[i].Hostname] && old >= 0 && got[i] == prev[old]:
				t.Fatalf("round %d: group %s touched but not made again", round, got[i].Hostname)
			case !touched[got[i].Hostname] && (old < 0 || got[i] != prev[old]):
				t.Fatalf("round %d: group %s not touched but made again", round, got[i].Hostname)
			}
		}
	}
}
