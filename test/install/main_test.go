package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"coxswain.dev/coxswain/internal/testenv"
)

var (
	c          client.Client
	restConfig *rest.Config
	root       string
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, func(cfg *rest.Config) error {
		var err error
		restConfig = cfg
		if root, err = testenv.ProjectRoot(); err != nil {
			return err
		}
		c, err = client.New(cfg, client.Options{})
		return err
	}))
}

// kustomizeBuild renders a kustomization directory of config/ with the pinned kustomize
// (KUSTOMIZE, else bin/kustomize-<version> as `make kustomize` installs it).
func kustomizeBuild(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	bin := os.Getenv("KUSTOMIZE")
	if bin == "" {
		matches, _ := filepath.Glob(filepath.Join(root, "bin", "kustomize-*"))
		if len(matches) == 0 {
			t.Fatal("kustomize not found: run `make kustomize` or set KUSTOMIZE")
		}
		bin = matches[0]
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), bin, "build", filepath.Join(root, "config", dir)) //nolint:gosec // the pinned tool on a fixed directory
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kustomize build %s: %v\n%s", dir, err, stderr.String())
	}
	objs, err := decodeAll(&stdout)
	if err != nil {
		t.Fatalf("decode kustomize build %s: %v", dir, err)
	}
	if len(objs) == 0 {
		t.Fatalf("kustomize build %s gave no objects", dir)
	}
	return objs
}

func decodeAll(r io.Reader) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// apply server-side applies objs, for real or as a dry run; objs are not modified.
func apply(ctx context.Context, objs []*unstructured.Unstructured, dryRun bool) error {
	var errs []error
	for _, u := range objs {
		opts := []client.ApplyOption{client.FieldOwner("install-test"), client.ForceOwnership}
		if dryRun {
			opts = append(opts, client.DryRunAll)
		}
		// Apply writes the answer into the object it is given: give it a copy.
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u.DeepCopy()), opts...); err != nil {
			errs = append(errs, fmt.Errorf("%s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err))
		}
	}
	return errors.Join(errs...)
}

func ofKinds(objs []*unstructured.Unstructured, kinds ...string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, u := range objs {
		for _, k := range kinds {
			if u.GetKind() == k {
				out = append(out, u)
			}
		}
	}
	return out
}
