package agent

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/resource"
)

// FuzzBuildDelta feeds the agent's delta merge deltas decoded from arbitrary bytes, over a fixed
// applied set. Whatever arrives, build must not panic, must leave the applied set untouched, and
// may accept only a set that hashes to the delta's version and holds exactly the base keys minus
// the removed ones plus the upserts, each upsert with its payload.
func FuzzBuildDelta(f *testing.F) {
	t := &testing.T{}
	base := []*discoveryv1.Resource{testResource(t, "a", "1"), testResource(t, "b", "2")}
	baseVersion := versionOfResources(t, base...)
	c := testResource(t, "c", "3")
	seeds := []*discoveryv1.Snapshot{
		{Version: versionOfResources(t, base[0], c), Resources: []*discoveryv1.Resource{c}, RemovedKeys: []string{"b"}},
		{Version: versionOfResources(t, base[0], base[1], c), Resources: []*discoveryv1.Resource{c, c}},
		{Version: baseVersion, RemovedKeys: []string{"z"}},
		{Version: baseVersion, Resources: []*discoveryv1.Resource{{Key: ""}}},
		{Version: versionOfResources(t, base[0]), RemovedKeys: []string{"b", "b"}},
	}
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var snap discoveryv1.Snapshot
		if proto.Unmarshal(data, &snap) != nil {
			return
		}
		snap.Full = false
		applied, err := resource.NewSet(baseVersion, base)
		if err != nil {
			t.Fatal(err)
		}
		before := applied.Keys()
		a := &Agent{applied: applied}
		set, _, err := a.build(&snap)
		if !slices.Equal(before, applied.Keys()) || applied.Version() != baseVersion {
			t.Fatalf("the applied set changed: keys %v -> %v", before, applied.Keys())
		}
		if err != nil {
			return
		}
		if _, verr := verifyVersion(set, nil); set.Version() != snap.GetVersion() || verr != nil {
			t.Fatalf("accepted a set of version %s for snapshot %s", set.Version(), snap.GetVersion())
		}
		want := map[string]bool{}
		for _, k := range before {
			want[k] = true
		}
		for _, k := range snap.GetRemovedKeys() {
			delete(want, k)
		}
		for _, r := range snap.GetResources() {
			want[r.GetKey()] = true
			got, ok := set.Get(r.GetKey())
			if !ok || !proto.Equal(got, r.GetPayload()) {
				t.Fatalf("upsert %q is not in the merged set as sent", r.GetKey())
			}
		}
		if len(want) != set.Len() {
			t.Fatalf("merged set holds %v, want the keys %v", set.Keys(), want)
		}
	})
}
