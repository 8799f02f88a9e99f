package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

const (
	envOperator = "COXSWAIN_E2E_OPERATOR"
	envProxy    = "COXSWAIN_E2E_PROXY"
)

// Binaries are the paths of the compiled operator and proxy.
type Binaries struct {
	Operator string
	Proxy    string
}

// Build compiles the operator (the root module at root) and the proxy (its proxy module) into
// dir. It runs before the suite enters its network namespace, where module downloads would
// fail. The binaries are built without the race detector whatever the test binary uses: they
// are the system under test, not the test. A binary whose path the environment already names
// (COXSWAIN_E2E_OPERATOR, COXSWAIN_E2E_PROXY) is tested as it is, not built.
func Build(ctx context.Context, root, dir string) (Binaries, error) {
	b := Binaries{Operator: os.Getenv(envOperator), Proxy: os.Getenv(envProxy)}
	for _, bin := range []struct {
		path      *string
		moduleDir string
		name      string
	}{
		{&b.Operator, root, "coxswain"},
		{&b.Proxy, filepath.Join(root, "proxy"), "coxswain-proxy"},
	} {
		if *bin.path != "" {
			continue
		}
		*bin.path = filepath.Join(dir, bin.name)
		if err := goBuild(ctx, bin.moduleDir, *bin.path); err != nil {
			return Binaries{}, err
		}
	}
	return b, nil
}

func goBuild(ctx context.Context, moduleDir, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, ".") //nolint:gosec // our own module
	cmd.Dir = moduleDir
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build in %s: %w\n%s", moduleDir, err, strings.TrimSpace(output.String()))
	}
	return nil
}

// Env returns the environment entries that hand b to the re-executed test binary.
func (b Binaries) Env() []string {
	return []string{envOperator + "=" + b.Operator, envProxy + "=" + b.Proxy}
}

// BinariesFromEnv returns the binaries the parent test binary built.
func BinariesFromEnv() (Binaries, error) {
	b := Binaries{Operator: os.Getenv(envOperator), Proxy: os.Getenv(envProxy)}
	for _, path := range []string{b.Operator, b.Proxy} {
		if _, err := os.Stat(path); err != nil {
			return Binaries{}, fmt.Errorf("e2e: binary built before entering the namespace: %w", err)
		}
	}
	return b, nil
}
