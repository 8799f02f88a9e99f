package snapshot_test

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/snapshot"
	"coxswain.dev/coxswain/internal/state"
	"coxswain.dev/coxswain/internal/state/statetest"
)

// Tests that compiling every scope with a Memo, first empty and then filled, gives what Compile
// gives, for every golden input of the graph; and that a filled memo hands back the very same
// listeners when nothing changed.
func TestMemoCompilesWhatCompileCompiles(t *testing.T) {
	t.Parallel()
	for _, in := range statetest.GoldenInputs(t, "../graph/testdata") {
		t.Run(in.Name, func(t *testing.T) {
			t.Parallel()
			cs := in.State(t)
			g := graph.Build(cs, graph.Options{})
			want, err := json.Marshal(snapshot.Compile(g))
			if err != nil {
				t.Fatal(err)
			}
			memos := map[snapshot.Scope]*snapshot.Memo{}
			var first []*snapshot.Snapshot
			for round := range 2 {
				got, b := compileWithMemos(t, g, memos)
				if !bytes.Equal(want, b) {
					t.Fatalf("round %d differs from Compile:\ngot  %s\nwant %s", round, b, want)
				}
				if round == 0 {
					first = got
					continue
				}
				for i, s := range got {
					for j, l := range s.Listeners {
						if l != first[i].Listeners[j] {
							t.Errorf("%s: listener %s compiled again with nothing changed", s.Scope, l.Name)
						}
					}
				}
			}
		})
	}
}

// Tests that a filled memo does not hand back a listener whose client certificate validation
// changed while its routes did not: a new CA bundle reaches the proxies even without the
// pipeline's reset on a ConfigMap change.
func TestMemoRecompilesAListenerWhoseClientCAsChanged(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../graph/testdata/frontend-tls.in.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cs, err := state.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	memos := map[snapshot.Scope]*snapshot.Memo{}
	compile := func(g *graph.Graph) []byte {
		_, b := compileWithMemos(t, g, memos)
		return b
	}
	before := compile(graph.Build(cs, graph.Options{}))

	// The default namespace's client CA now holds its certificate and the pki namespace's.
	ours := types.NamespacedName{Namespace: "default", Name: "client-ca"}
	theirs := types.NamespacedName{Namespace: "pki", Name: "shared-ca"}
	cm := cs.ConfigMaps[ours].DeepCopy()
	cm.Data["ca.crt"] += cs.ConfigMaps[theirs].Data["ca.crt"]
	cs.ConfigMaps[ours] = cm
	g := graph.Build(cs, graph.Options{})
	want, err := json.Marshal(snapshot.Compile(g))
	if err != nil {
		t.Fatal(err)
	}
	got := compile(g)
	if bytes.Equal(before, want) {
		t.Fatal("the CA change changed nothing: the test proves nothing")
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("memo kept the old client CAs:\ngot  %s\nwant %s", got, want)
	}
}

// compileWithMemos compiles every scope of g with its memo of memos (made when missing) and
// returns the snapshots and their JSON.
func compileWithMemos(t *testing.T, g *graph.Graph, memos map[snapshot.Scope]*snapshot.Memo) ([]*snapshot.Snapshot, []byte) {
	t.Helper()
	var got []*snapshot.Snapshot
	for _, p := range snapshot.Plan(g) {
		if memos[p.Scope] == nil {
			memos[p.Scope] = snapshot.NewMemo()
		}
		got = append(got, snapshot.CompileScope(p, g.Clusters, memos[p.Scope]))
	}
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	return got, b
}
