package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// ErrNoAssets is returned when the control plane binaries cannot be found.
var ErrNoAssets = errors.New("control plane binaries not found: run `make test` or hack/k8s-assets.sh, or set KUBEBUILDER_ASSETS")

// ProjectRoot walks up from the working directory to the root module's directory.
func ProjectRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find project root: %w", err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod")) //nolint:gosec // walks up from the working directory
		if err == nil && strings.Contains(string(data), "module coxswain.dev/coxswain\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find project root: no go.mod of coxswain.dev/coxswain above the working directory")
		}
		dir = parent
	}
}

// AssetsDir returns KUBEBUILDER_ASSETS, or bin/k8s under the project root when it holds the
// binaries.
func AssetsDir(root string) (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	dir := filepath.Join(root, "bin", "k8s")
	if _, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err != nil {
		return "", ErrNoAssets
	}
	return dir, nil
}

// New returns an envtest environment that installs Coxswain's CRDs and the Gateway API CRDs.
func New() (*envtest.Environment, error) {
	root, err := ProjectRoot()
	if err != nil {
		return nil, err
	}
	assets, err := AssetsDir(root)
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths: []string{
			filepath.Join(root, "config", "crd", "bases"),
			filepath.Join(root, "config", "gateway-api"),
		},
		ErrorIfCRDPathMissing: true,
	}
	return env, nil
}
