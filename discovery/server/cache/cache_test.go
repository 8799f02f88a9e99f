package cache

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
)

func resource(t *testing.T, key, value string) *discoveryv1.Resource {
	t.Helper()
	r, err := NewResource(key, wrapperspb.String(value))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func keys(rs []*discoveryv1.Resource) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.GetKey())
	}
	return out
}

func TestSnapshotVersionIgnoresInputOrder(t *testing.T) {
	t.Parallel()
	var rs []*discoveryv1.Resource
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
		rs = append(rs, resource(t, k, "value of "+k))
	}
	want, err := NewSnapshot(rs, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		shuffled := slices.Clone(rs)
		rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		got, err := NewSnapshot(shuffled, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Version() != want.Version() {
			t.Fatalf("version %s after shuffle, want %s", got.Version(), want.Version())
		}
		if diff := cmp.Diff(keys(want.Resources()), keys(got.Resources())); diff != "" {
			t.Fatalf("resource order (-want +got):\n%s", diff)
		}
	}
}

func TestSnapshotVersionIsDeterministicForMaps(t *testing.T) {
	t.Parallel()
	fields := map[string]any{}
	for i := range 50 {
		fields[string(rune('a'+i%26))+string(rune('a'+i/26))] = float64(i)
	}
	s, err := structpb.NewStruct(fields)
	if err != nil {
		t.Fatal(err)
	}
	var versions []string
	for range 10 {
		r, err := NewResource("k", s)
		if err != nil {
			t.Fatal(err)
		}
		snap, err := NewSnapshot([]*discoveryv1.Resource{r}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		versions = append(versions, snap.Version())
	}
	if len(slices.Compact(slices.Clone(versions))) != 1 {
		t.Fatalf("versions differ: %v", versions)
	}
}

func TestSnapshotVersionChangesWithContent(t *testing.T) {
	t.Parallel()
	base := []*discoveryv1.Resource{resource(t, "a", "1"), resource(t, "b", "2")}
	cases := map[string][]*discoveryv1.Resource{
		"a changed payload":     {resource(t, "a", "1x"), resource(t, "b", "2")},
		"a renamed key":         {resource(t, "a2", "1"), resource(t, "b", "2")},
		"a removed resource":    {resource(t, "b", "2")},
		"an added resource":     {resource(t, "a", "1"), resource(t, "b", "2"), resource(t, "c", "3")},
		"an empty set":          {},
		"keys swapped payloads": {resource(t, "a", "2"), resource(t, "b", "1")},
	}
	want, err := NewSnapshot(base, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	for name, rs := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := NewSnapshot(rs, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Version() == want.Version() {
				t.Fatalf("version unchanged: %s", got.Version())
			}
		})
	}
}

func TestSnapshotRejectsInvalidResources(t *testing.T) {
	t.Parallel()
	cases := map[string][]*discoveryv1.Resource{
		"a resource without a key":     {{Payload: resource(t, "x", "1").GetPayload()}},
		"a resource without a payload": {{Key: "a"}},
		"a key used twice":             {resource(t, "a", "1"), resource(t, "a", "2")},
	}
	for name, rs := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if _, err := NewSnapshot(rs, time.Time{}); !errors.Is(err, ErrInvalidResource) {
				t.Fatalf("error %v, want ErrInvalidResource", err)
			}
		})
	}
}

func TestDiffListsUpsertsAndRemovals(t *testing.T) {
	t.Parallel()
	prev, _ := NewSnapshot([]*discoveryv1.Resource{resource(t, "keep", "1"), resource(t, "change", "1"), resource(t, "drop", "1")}, time.Time{})
	next, _ := NewSnapshot([]*discoveryv1.Resource{resource(t, "keep", "1"), resource(t, "change", "2"), resource(t, "add", "1")}, time.Time{})
	upserts, removed := Diff(prev, next)
	want := []*discoveryv1.Resource{resource(t, "add", "1"), resource(t, "change", "2")}
	if diff := cmp.Diff(want, upserts, protocmp.Transform()); diff != "" {
		t.Errorf("upserts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"drop"}, removed); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
}

// Tests Diff on random pairs of sets against the keys and payloads compared one by one.
func TestDiffOfRandomSets(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(11, 12))
	random := func() (*Snapshot, map[string]string) {
		values := map[string]string{}
		var rs []*discoveryv1.Resource
		for i := range 30 {
			if rnd.IntN(3) == 0 {
				continue
			}
			key, value := fmt.Sprintf("k%02d", i), fmt.Sprint(rnd.IntN(3))
			values[key] = value
			rs = append(rs, resource(t, key, value))
		}
		s, err := NewSnapshot(rs, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		return s, values
	}
	for range 200 {
		prev, pv := random()
		next, nv := random()
		upserts, removed := Diff(prev, next)
		var wantUpserts, wantRemoved []string
		for _, k := range slices.Sorted(maps.Keys(nv)) {
			if v, ok := pv[k]; !ok || v != nv[k] {
				wantUpserts = append(wantUpserts, k)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(pv)) {
			if _, ok := nv[k]; !ok {
				wantRemoved = append(wantRemoved, k)
			}
		}
		var got []string
		for _, r := range upserts {
			got = append(got, r.GetKey())
		}
		if !slices.Equal(got, wantUpserts) || !slices.Equal(removed, wantRemoved) {
			t.Fatalf("Diff: upserts %v removed %v, want %v and %v", got, removed, wantUpserts, wantRemoved)
		}
	}
}

func fired(w *Watch) bool {
	select {
	case <-w.Changed():
		return true
	default:
		return false
	}
}

func TestCacheWakesWatchersOnlyOnNewVersions(t *testing.T) {
	t.Parallel()
	c := New(nil)
	scope := Gateway("prod", "web")
	w := c.Watch(scope)
	defer w.Cancel()
	other := c.Watch(SharedPool())
	defer other.Cancel()
	if fired(w) {
		t.Fatal("a watch of an empty scope fired")
	}
	set := func(rs ...*discoveryv1.Resource) bool {
		t.Helper()
		changed, err := c.Set(scope, rs)
		if err != nil {
			t.Fatal(err)
		}
		return changed
	}
	if !set(resource(t, "a", "1")) || !fired(w) {
		t.Fatal("the first Set did not change the scope and wake its watcher")
	}
	if set(resource(t, "a", "1")) || fired(w) {
		t.Fatal("an unchanged Set woke the watcher")
	}
	set(resource(t, "a", "2"))
	set(resource(t, "a", "3"))
	if !fired(w) || fired(w) {
		t.Fatal("two changes did not coalesce into one wake-up")
	}
	if got := w.Snapshot().Resources()[0].GetPayload(); !cmp.Equal(got, resource(t, "a", "3").GetPayload(), protocmp.Transform()) {
		t.Fatalf("latest payload %v", got)
	}
	if fired(other) {
		t.Fatal("a watcher of another scope woke up")
	}
}

func TestWatchOfAnExistingSnapshotFiresAtOnce(t *testing.T) {
	t.Parallel()
	c := New(nil)
	if _, err := c.Set(SharedPool(), []*discoveryv1.Resource{resource(t, "a", "1")}); err != nil {
		t.Fatal(err)
	}
	w := c.Watch(SharedPool())
	w.Cancel()
	w.Cancel()
	if !fired(w) {
		t.Fatal("watch did not fire for the existing snapshot")
	}
	if !c.Delete(SharedPool()) || c.Get(SharedPool()) != nil {
		t.Fatal("Delete kept the snapshot")
	}
}

func TestScopeFromProto(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		in      *discoveryv1.Scope
		want    Scope
		wantErr bool
	}{
		{name: "the shared pool converts", in: SharedPool().Proto(), want: SharedPool()},
		{name: "a Gateway converts", in: Gateway("ns", "gw").Proto(), want: Gateway("ns", "gw")},
		{name: "a nil scope is invalid", in: nil, wantErr: true},
		{name: "a scope without a kind is invalid", in: &discoveryv1.Scope{}, wantErr: true},
		{name: "a Gateway without a name is invalid", in: Gateway("ns", "").Proto(), wantErr: true},
		{name: "a Gateway without a namespace is invalid", in: Gateway("", "gw").Proto(), wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ScopeFromProto(tc.in)
			if tc.wantErr {
				if !errors.Is(err, ErrInvalidScope) {
					t.Fatalf("error %v, want ErrInvalidScope", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestSetRejectsAnInvalidScope(t *testing.T) {
	t.Parallel()
	if _, err := New(nil).Set(Scope{}, nil); !errors.Is(err, ErrInvalidScope) {
		t.Fatalf("error %v, want ErrInvalidScope", err)
	}
}

// Tests that a snapshot built beforehand publishes exactly as Set would publish its resources,
// stamped with the cache's clock at publication, and that the same content set again is no
// change.
func TestSetSnapshotPublishesAPrebuiltSnapshot(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := New(func() time.Time { return at })
	resources := []*discoveryv1.Resource{resource(t, "a", "1"), resource(t, "b", "2")}
	snap, err := NewSnapshot(resources, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	changed, err := c.SetSnapshot(SharedPool(), snap)
	if err != nil || !changed {
		t.Fatalf("SetSnapshot = %v, %v; want a change", changed, err)
	}
	got := c.Get(SharedPool())
	if got != snap || !got.CreatedAt().Equal(at) {
		t.Fatalf("published %p created %v, want the given snapshot %p created %v", got, got.CreatedAt(), snap, at)
	}
	if changed, err := c.Set(SharedPool(), resources); err != nil || changed {
		t.Fatalf("Set of the same resources = %v, %v; want no change", changed, err)
	}
	if _, err := c.SetSnapshot(Scope{}, snap); err == nil {
		t.Error("SetSnapshot accepted an invalid scope")
	}
}

// Tests that a snapshot built on its predecessor has the version a snapshot built from nothing
// has, whichever resources it shares with the predecessor, adds, replaces or drops.
func TestSnapshotReusingAgreesWithNewSnapshot(t *testing.T) {
	t.Parallel()
	a, b, c := resource(t, "a", "1"), resource(t, "b", "2"), resource(t, "c", "3")
	prev, err := NewSnapshot([]*discoveryv1.Resource{a, b, c}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string][]*discoveryv1.Resource{
		"the same resources":          {c, a, b},
		"one replaced under its key":  {a, resource(t, "b", "2x"), c},
		"one dropped and one added":   {a, c, resource(t, "d", "4")},
		"one added before the others": {resource(t, "0", "0"), a, b, c},
		"nothing":                     {},
	}
	for name, rs := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			want, err := NewSnapshot(rs, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := NewSnapshotReusing(prev, rs, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Version() != want.Version() || got.EncodedSize() != want.EncodedSize() {
				t.Fatalf("version %s size %d, want %s size %d", got.Version(), got.EncodedSize(), want.Version(), want.EncodedSize())
			}
		})
	}
}
