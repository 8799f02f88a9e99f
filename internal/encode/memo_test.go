package encode_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"coxswain.dev/coxswain/internal/encode"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/snapshot"
	"coxswain.dev/coxswain/internal/state"
)

// Tests that a Memo, which reuses what it encoded before, gives byte for byte the resources and
// versions of encoding every message anew (encode.All), for every one of the graph's golden
// inputs, on its first encoding and on the next, which reuses the first: proxies and versions
// cannot tell the two apart.
func TestMemoEncodesAsAll(t *testing.T) {
	ins, _ := filepath.Glob(filepath.Join(graphInputs, "*.in.yaml"))
	if len(ins) == 0 {
		t.Fatal("no graph inputs")
	}
	listeners := 0
	for _, in := range ins {
		t.Run(strings.TrimSuffix(filepath.Base(in), ".in.yaml"), func(t *testing.T) {
			raw, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			cs, err := state.Decode(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			snaps := snapshot.Compile(graph.Build(cs, graph.Options{}))
			whole, err := encode.All(snaps)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range snaps {
				// Twice with one memo: the second encoding reuses what the first made.
				m := encode.NewMemo()
				for range 2 {
					got, err := m.Snapshot(s)
					if err != nil {
						t.Fatal(err)
					}
					want := whole[i]
					if got.Version != want.Version || len(got.Resources) != len(want.Resources) {
						t.Fatalf("scope %s: version %s with %d resources, want %s with %d", want.Scope, got.Version, len(got.Resources), want.Version, len(want.Resources))
					}
					for j, r := range got.Resources {
						w := want.Resources[j]
						if r.GetKey() != w.GetKey() || r.GetPayload().GetTypeUrl() != w.GetPayload().GetTypeUrl() ||
							!bytes.Equal(r.GetPayload().GetValue(), w.GetPayload().GetValue()) {
							t.Fatalf("scope %s: resource %s (%s, %d bytes) differs from %s (%s, %d bytes)", want.Scope,
								r.GetKey(), r.GetPayload().GetTypeUrl(), len(r.GetPayload().GetValue()),
								w.GetKey(), w.GetPayload().GetTypeUrl(), len(w.GetPayload().GetValue()))
						}
						if strings.HasPrefix(r.GetKey(), encode.ListenerKeyPrefix) {
							listeners++
						}
					}
				}
			}
		})
	}
	if listeners == 0 {
		t.Fatal("no listener was compared")
	}
}
