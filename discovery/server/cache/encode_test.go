package cache

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
)

// decode parses an encoding as a Snapshot message.
func decode(t *testing.T, b []byte) *discoveryv1.Snapshot {
	t.Helper()
	m := &discoveryv1.Snapshot{}
	if err := proto.Unmarshal(b, m); err != nil {
		t.Fatal(err)
	}
	return m
}

// encode calls s.Encode(prev) and fails the test on an error.
func encode(t *testing.T, s, prev *Snapshot) ([]byte, bool) {
	t.Helper()
	b, fresh, err := s.Encode(prev)
	if err != nil {
		t.Fatal(err)
	}
	return b, fresh
}

func same(a, b []byte) bool { return len(a) > 0 && len(b) > 0 && &a[0] == &b[0] }

func TestEncodeGivesTheFullSnapshotAndTheDeltaWithoutNonce(t *testing.T) {
	t.Parallel()
	c := New(nil)
	scope := Gateway("prod", "web")
	if _, err := c.Set(scope, []*discoveryv1.Resource{resource(t, "keep", "1"), resource(t, "drop", "1")}); err != nil {
		t.Fatal(err)
	}
	prev := c.Get(scope)
	if _, err := c.Set(scope, []*discoveryv1.Resource{resource(t, "keep", "1"), resource(t, "add", "2")}); err != nil {
		t.Fatal(err)
	}
	next := c.Get(scope)
	full, _ := encode(t, next, nil)
	want := &discoveryv1.Snapshot{Version: next.Version(), Full: true, Resources: next.Resources()}
	if diff := cmp.Diff(want, decode(t, full), protocmp.Transform()); diff != "" {
		t.Errorf("full snapshot (-want +got):\n%s", diff)
	}
	if next.EncodedSize() != len(full) {
		t.Errorf("EncodedSize %d, encoding has %d bytes", next.EncodedSize(), len(full))
	}
	delta, _ := encode(t, next, prev)
	want = &discoveryv1.Snapshot{Version: next.Version(), Resources: []*discoveryv1.Resource{resource(t, "add", "2")}, RemovedKeys: []string{"drop"}}
	if diff := cmp.Diff(want, decode(t, delta), protocmp.Transform()); diff != "" {
		t.Errorf("delta (-want +got):\n%s", diff)
	}
}

func TestEncodeMakesEachEncodingOnceForAllCallers(t *testing.T) {
	t.Parallel()
	prev, _ := NewSnapshot([]*discoveryv1.Resource{resource(t, "a", "1")}, time.Time{})
	next, _ := NewSnapshot([]*discoveryv1.Resource{resource(t, "a", "2")}, time.Time{})
	for _, base := range []*Snapshot{nil, prev} {
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			got   [][]byte
			fresh int
		)
		for range 32 {
			wg.Go(func() {
				b, f, err := next.Encode(base)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				got = append(got, b)
				if f {
					fresh++
				}
			})
		}
		wg.Wait()
		if fresh != 1 {
			t.Errorf("base %v: %d callers made the encoding, want 1", base != nil, fresh)
		}
		for _, b := range got {
			if !same(b, got[0]) {
				t.Fatalf("base %v: callers got different byte slices", base != nil)
			}
		}
	}
	full, _ := encode(t, next, nil)
	delta, _ := encode(t, next, prev)
	if same(full, delta) {
		t.Fatal("the full snapshot and the delta share their bytes")
	}
}

func TestEncodeKeysDeltasByTheBaseVersion(t *testing.T) {
	t.Parallel()
	rs := []*discoveryv1.Resource{resource(t, "a", "1")}
	base, _ := NewSnapshot(rs, time.Time{})
	twin, _ := NewSnapshot(rs, time.Time{})
	other, _ := NewSnapshot([]*discoveryv1.Resource{resource(t, "b", "1")}, time.Time{})
	next, _ := NewSnapshot([]*discoveryv1.Resource{resource(t, "a", "2")}, time.Time{})
	fromBase, _ := encode(t, next, base)
	if fromTwin, fresh := encode(t, next, twin); fresh || !same(fromBase, fromTwin) {
		t.Error("a base of the same content did not share the delta")
	}
	if fromOther, fresh := encode(t, next, other); !fresh || same(fromBase, fromOther) {
		t.Error("a base of other content shared the delta")
	}
}

func TestEncodeKeepsAtMostMaxDeltaEncodings(t *testing.T) {
	t.Parallel()
	next, _ := NewSnapshot([]*discoveryv1.Resource{resource(t, "a", "next")}, time.Time{})
	var bases []*Snapshot
	for i := range MaxDeltaEncodings + 1 {
		b, _ := NewSnapshot([]*discoveryv1.Resource{resource(t, "a", strconv.Itoa(i))}, time.Time{})
		bases = append(bases, b)
		encode(t, next, b)
	}
	if n := len(next.enc.deltas); n != MaxDeltaEncodings {
		t.Fatalf("%d delta encodings kept, want %d", n, MaxDeltaEncodings)
	}
	if _, fresh := encode(t, next, bases[MaxDeltaEncodings]); fresh {
		t.Error("the newest base was encoded again")
	}
	if _, fresh := encode(t, next, bases[0]); !fresh {
		t.Error("the oldest base was still kept")
	}
}

func TestASupersededSnapshotKeepsNoEncoding(t *testing.T) {
	t.Parallel()
	c := New(nil)
	for name, replace := range map[string]func(*testing.T, Scope){
		"a new version": func(t *testing.T, s Scope) {
			if _, err := c.Set(s, []*discoveryv1.Resource{resource(t, "a", "2")}); err != nil {
				t.Fatal(err)
			}
		},
		"a deletion": func(_ *testing.T, s Scope) { c.Delete(s) },
	} {
		t.Run(name, func(t *testing.T) {
			scope := Gateway("prod", name)
			if _, err := c.Set(scope, []*discoveryv1.Resource{resource(t, "a", "1")}); err != nil {
				t.Fatal(err)
			}
			old := c.Get(scope)
			before, _ := encode(t, old, nil)
			if _, err := c.Set(scope, []*discoveryv1.Resource{resource(t, "a", "1")}); err != nil {
				t.Fatal(err)
			}
			if again, fresh := encode(t, old, nil); fresh || !same(before, again) {
				t.Fatal("an unchanged Set dropped the encoding")
			}
			replace(t, scope)
			a, freshA := encode(t, old, nil)
			b, freshB := encode(t, old, nil)
			if !freshA || !freshB || same(a, b) || same(a, before) {
				t.Fatal("a superseded snapshot shared an encoding")
			}
			if old.enc.full != nil || len(old.enc.deltas) != 0 {
				t.Fatal("a superseded snapshot kept an encoding")
			}
			if diff := cmp.Diff(decode(t, before), decode(t, a), protocmp.Transform()); diff != "" {
				t.Fatalf("encoding after supersession (-before +after):\n%s", diff)
			}
		})
	}
}
