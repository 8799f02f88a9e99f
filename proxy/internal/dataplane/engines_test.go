package dataplane_test

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"coxswain.dev/coxswain/proxy/internal/dataplane"
	"coxswain.dev/coxswain/proxy/internal/dataplane/http1"
)

// engineEnv names the one HTTP/1.1 engine a run of this package's tests uses
// (COXSWAIN_HTTP1_ENGINE=native or nethttp); unset or empty, the whole suite runs once per
// engine, native first.
const engineEnv = "COXSWAIN_HTTP1_ENGINE"

// engine is the HTTP/1.1 engine of the pass running: every data plane the tests build serves
// and forwards with it (see withEngine).
var engine http1.Engine

// firstPass says the pass running is the first: tests that build both engines themselves run
// in it only.
var firstPass bool

// TestMain runs every test of the package once per HTTP/1.1 engine, each pass checked for
// leaked goroutines, and the benchmarks (which name their engines themselves) in the first
// pass only.
func TestMain(m *testing.M) {
	engines, err := passes(os.Getenv(engineEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for _, e := range http1.Engines {
		if partsOf[e], err = detectParts(e); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	code := 0
	for i, e := range engines {
		engine, firstPass, running = e, i == 0, partsOf[e]
		fmt.Printf("=== HTTP/1.1 engine %s: %s (pass %d of %d; %s=%s runs only this one)\n", e, running, i+1, len(engines), engineEnv, e)
		if c := runPass(m); c != 0 {
			fmt.Printf("=== HTTP/1.1 engine %s: FAIL\n", e)
			code = c
		}
		skipBenchmarks()
	}
	os.Exit(code)
}

// passes returns the engines the suite runs with: the one env names, or every engine.
func passes(env string) ([]http1.Engine, error) {
	if env == "" {
		return http1.Engines, nil
	}
	e, err := http1.ParseEngine(env)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", engineEnv, err)
	}
	return []http1.Engine{e}, nil
}

// runPass runs the tests once and checks that they left no goroutine behind.
func runPass(m *testing.M) int {
	code := m.Run()
	if code != 0 {
		return code
	}
	if err := goleak.Find(); err != nil {
		fmt.Fprintf(os.Stderr, "goleak: errors on a successful pass with engine %s: %v\n", engine, err)
		return 1
	}
	return 0
}

// skipBenchmarks keeps later passes from running the benchmarks again.
func skipBenchmarks() {
	for _, name := range []string{"test.bench", "test.fuzz"} {
		if f := flag.Lookup(name); f != nil {
			_ = f.Value.Set("")
		}
	}
}

// withEngine returns opts with the HTTP/1.1 engine of the pass, unless opts names one.
func withEngine(opts dataplane.Options) dataplane.Options {
	if opts.HTTP1Engine == "" {
		opts.HTTP1Engine = engine
	}
	return opts
}

// nameEngineOnFailure makes a failing test log the engine it failed with, since test names do
// not carry it.
func nameEngineOnFailure(t testing.TB, e http1.Engine) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("HTTP/1.1 engine %s", e)
		}
	})
}
