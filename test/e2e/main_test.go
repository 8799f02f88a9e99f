package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"coxswain.dev/coxswain/internal/testenv"
)

// TestMain runs the tests inside private namespaces: outside, it compiles the binaries under
// test and re-executes this test binary under unshare; inside, it sets up the loopback and runs
// the tests.
func TestMain(m *testing.M) {
	switch {
	case InNamespace():
		if err := SetUpNamespace(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(m.Run())
	case Skipped():
		os.Exit(m.Run()) // every test skips itself outside the namespaces
	default:
		os.Exit(enterNamespaces())
	}
}

func enterNamespaces() int {
	ctx := context.Background()
	if err := CheckNamespaces(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	root, err := testenv.ProjectRoot()
	if err == nil {
		_, err = testenv.AssetsDir(root)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "coxswain-e2e-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir) //nolint:errcheck // a temporary directory
	start := time.Now()
	bins, err := Build(ctx, root, dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: built the operator and the proxy in %s\n", time.Since(start).Round(100*time.Millisecond))
	// Everything the tests write goes under dir, which goes when they end, even by a panic.
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	code, err := RunInNamespaces(ctx, os.Args[1:], append(bins.Env(), "TMPDIR="+tmp))
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
	}
	return code
}
