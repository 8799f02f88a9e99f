// Package golden is the golden-file harness of the pure stages' tests (graph, snapshot,
// provision): testdata/<case>.in.yaml is rendered and compared with testdata/<case>.out.yaml,
// -update rewrites the outputs, and outputs whose input is gone are reported or swept.
package golden

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Suffixes of a case's input and output in testdata/.
const (
	InSuffix  = ".in.yaml"
	OutSuffix = ".out.yaml"
)

// Inputs returns the cases' input files, failing the test when there is none.
func Inputs(t testing.TB) []string {
	t.Helper()
	ins, err := filepath.Glob(filepath.Join("testdata", "*"+InSuffix))
	if err != nil || len(ins) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	return ins
}

// Name is the case name of an input file.
func Name(in string) string { return strings.TrimSuffix(filepath.Base(in), InSuffix) }

// Check compares got with the output file of input in, or rewrites that file when update.
func Check(t testing.TB, in string, got []byte, update bool) {
	t.Helper()
	outPath := strings.TrimSuffix(in, InSuffix) + OutSuffix
	if update {
		if err := os.WriteFile(outPath, got, 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(outPath) //nolint:gosec // derived from a fixture path
	if err != nil {
		t.Fatalf("read golden output (run with -update to create it): %v", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs from the output (-want +got):\n%s", outPath, diff)
	}
}

// NoStaleOutputs fails for every output file left without its input; with update it removes
// them instead.
func NoStaleOutputs(t testing.TB, update bool) {
	t.Helper()
	outs, err := filepath.Glob(filepath.Join("testdata", "*"+OutSuffix))
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range outs {
		in := strings.TrimSuffix(out, OutSuffix) + InSuffix
		if _, err := os.Stat(in); err == nil {
			continue
		}
		if update {
			if err := os.Remove(out); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s has no %s: remove it or run with -update", out, filepath.Base(in))
	}
}
