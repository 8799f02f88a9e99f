package statetest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"coxswain.dev/coxswain/internal/state"
)

// GoldenInput is one golden input of the graph (internal/graph/testdata/*.in.yaml): a cluster
// state in YAML.
type GoldenInput struct {
	Name string // the file's base name
	Raw  []byte
}

// GoldenInputs reads every *.in.yaml of dir, failing t when there is none.
func GoldenInputs(t testing.TB, dir string) []GoldenInput {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.in.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("golden inputs in %s: %v, %v", dir, paths, err)
	}
	out := make([]GoldenInput, 0, len(paths))
	for _, path := range paths {
		raw, err := os.ReadFile(path) //nolint:gosec // a test fixture path from Glob
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, GoldenInput{Name: filepath.Base(path), Raw: raw})
	}
	return out
}

// State decodes the input into a new cluster state, failing t on error.
func (g GoldenInput) State(t testing.TB) *state.ClusterState {
	t.Helper()
	cs, err := state.Decode(bytes.NewReader(g.Raw))
	if err != nil {
		t.Fatalf("%s: %v", g.Name, err)
	}
	return cs
}
