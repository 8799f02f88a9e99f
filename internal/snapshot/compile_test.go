package snapshot_test

import (
	"bytes"
	"os"
	"testing"

	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/snapshot"
	"coxswain.dev/coxswain/internal/state"
)

// Tests that a listener's private key reaches only the snapshot of the scope serving it.
func TestSecretsStayInTheirScope(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../graph/testdata/scopes.in.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cs, err := state.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"gateway/default/by-class": nil,
		"gateway/default/by-infra": {"default/edge-cert"},
		"shared-pool":              {"default/shared-b-cert"},
	}
	snaps := snapshot.Compile(graph.Build(cs, graph.Options{}))
	if len(snaps) != len(want) {
		t.Fatalf("got %d snapshots, want %d", len(snaps), len(want))
	}
	for _, s := range snaps {
		var got []string
		for _, sec := range s.Secrets {
			got = append(got, sec.Name)
			if len(sec.PrivateKey) == 0 {
				t.Errorf("%s: secret %s has no key", s.Scope, sec.Name)
			}
		}
		if len(got) != len(want[s.Scope.String()]) || (len(got) > 0 && got[0] != want[s.Scope.String()][0]) {
			t.Errorf("%s: secrets %v, want %v", s.Scope, got, want[s.Scope.String()])
		}
	}
}

// Tests that an empty cluster still yields the shared pool's (empty) snapshot.
func TestCompileEmpty(t *testing.T) {
	t.Parallel()
	snaps := snapshot.Compile(graph.Build(state.New(), graph.Options{}))
	if len(snaps) != 1 || snaps[0].Scope != snapshot.SharedPool() || len(snaps[0].Listeners) != 0 {
		t.Errorf("Compile(empty) = %+v, want one empty shared-pool snapshot", snaps)
	}
}
