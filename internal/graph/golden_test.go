package graph_test

import (
	"bytes"
	"errors"
	"flag"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"coxswain.dev/coxswain/internal/golden"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/snapshot"
	"coxswain.dev/coxswain/internal/state"
)

var update = flag.Bool("update", false, "rewrite the golden .out.yaml files from the current output")

// golden is what a case's .out.yaml holds: the computed status and the compiled snapshots.
type goldenOutput struct {
	Status    graph.Status         `json:"status"`
	Snapshots []*snapshot.Snapshot `json:"snapshots"`
}

func render(t testing.TB, cs *state.ClusterState, opts graph.Options) []byte {
	t.Helper()
	g := graph.Build(cs, opts)
	out, err := yaml.Marshal(goldenOutput{Status: g.Status(), Snapshots: snapshot.Compile(g)})
	if err != nil {
		t.Fatalf("marshal output: %v", err)
	}
	return out
}

// Tests that every testdata/<case>.in.yaml compiles to exactly testdata/<case>.out.yaml.
func TestGolden(t *testing.T) {
	for _, in := range golden.Inputs(t) {
		t.Run(golden.Name(in), func(t *testing.T) {
			t.Parallel()
			golden.Check(t, in, render(t, decodeFile(t, in), caseOptions(t, in)), *update)
		})
	}
}

// Tests that no .out.yaml outlives its .in.yaml; -update removes stale outputs.
func TestGoldenNoStaleOutputs(t *testing.T) { golden.NoStaleOutputs(t, *update) }

// Tests that the output depends on the cluster state only, not on the order objects arrive in.
func TestOrderInvariance(t *testing.T) {
	for _, in := range golden.Inputs(t) {
		t.Run(filepath.Base(in), func(t *testing.T) {
			t.Parallel()
			raw, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			opts := caseOptions(t, in)
			want := render(t, decode(t, raw), opts)
			docs := strings.Split(string(raw), "\n---\n")
			for seed := range uint64(5) {
				rng := rand.New(rand.NewPCG(seed, seed))
				rng.Shuffle(len(docs), func(i, j int) { docs[i], docs[j] = docs[j], docs[i] })
				cs := decode(t, []byte(strings.Join(docs, "\n---\n")))
				shuffleSets(rng, cs)
				if got := render(t, cs, opts); !bytes.Equal(want, got) {
					t.Fatalf("seed %d: output changed with input order:\n%s", seed, cmp.Diff(string(want), string(got)))
				}
			}
		})
	}
}

// shuffleSets reorders the lists inside objects whose order carries no meaning.
func shuffleSets(rng *rand.Rand, cs *state.ClusterState) {
	for _, s := range cs.EndpointSlices {
		rng.Shuffle(len(s.Endpoints), func(i, j int) { s.Endpoints[i], s.Endpoints[j] = s.Endpoints[j], s.Endpoints[i] })
	}
	for _, g := range cs.ReferenceGrants {
		rng.Shuffle(len(g.Spec.From), func(i, j int) { g.Spec.From[i], g.Spec.From[j] = g.Spec.From[j], g.Spec.From[i] })
		rng.Shuffle(len(g.Spec.To), func(i, j int) { g.Spec.To[i], g.Spec.To[j] = g.Spec.To[j], g.Spec.To[i] })
	}
}

// caseOptions reads the Build options of a case from testdata/<case>.options.yaml, strictly
// (field names of graph.Options); a case without that file builds with the zero Options.
func caseOptions(t testing.TB, in string) graph.Options {
	t.Helper()
	var opts graph.Options
	raw, err := os.ReadFile(strings.TrimSuffix(in, golden.InSuffix) + ".options.yaml")
	if errors.Is(err, fs.ErrNotExist) {
		return opts
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(raw, &opts); err != nil {
		t.Fatalf("decode options of %s: %v", filepath.Base(in), err)
	}
	return opts
}

func decodeFile(t *testing.T, path string) *state.ClusterState {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, raw)
}

func decode(t *testing.T, raw []byte) *state.ClusterState {
	t.Helper()
	cs, err := state.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("decode input: %v", err)
	}
	return cs
}
