package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"coxswain.dev/coxswain/hack/nodeagent/internal/image"
)

const manifest = `apiVersion: v1
kind: Namespace
metadata:
  name: demo
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: operator
spec:
  template:
    spec:
      initContainers:
      - name: init
        image: example.test/init:1
      containers:
      - name: manager
        image: example.test/operator:1
        env:
        - name: POD_NAME
          value: ignored
        - name: COXSWAIN_PROXY_IMAGE
          value: example.test/proxy:1
---
---
apiVersion: v1
kind: Pod
metadata:
  name: lone
spec:
  containers:
  - name: c
    image: example.test/lone
---
apiVersion: batch/v1
kind: CronJob
metadata:
  name: nightly
spec:
  jobTemplate:
    spec:
      template:
        spec:
          containers:
          - name: job
            image: example.test/operator:1
`

// Tests that the images a manifest runs are found in pod templates, pods, job templates and the
// operator's COXSWAIN_PROXY_IMAGE, each once.
func TestManifestImages(t *testing.T) {
	t.Parallel()
	got, err := manifestImages([]byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"example.test/init:1", "example.test/lone", "example.test/operator:1", "example.test/proxy:1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("images (-want +got):\n%s", diff)
	}
	if _, err := manifestImages([]byte("kind: [unclosed\n")); err == nil {
		t.Error("a manifest that is not YAML was accepted")
	}
}

// Tests that checking a manifest against the image map and the registry's images names every
// image that neither holds, and accepts an untagged image that a :latest entry covers.
func TestCheckImages(t *testing.T) {
	t.Parallel()
	m := image.Map{"example.test/operator:1": "/bin/op", "example.test/lone:latest": "/bin/lone"}
	err := checkImages([]byte(manifest), m, nil)
	if err == nil || !strings.Contains(err.Error(), "example.test/init:1, example.test/proxy:1 (") {
		t.Errorf("error %v, want one naming example.test/init:1 and example.test/proxy:1", err)
	}
	err = checkImages([]byte(manifest), m, []string{"example.test/proxy:1"})
	if err == nil || !strings.Contains(err.Error(), "example.test/init:1 (") {
		t.Errorf("error %v, want one naming only example.test/init:1", err)
	}
	m["example.test/init:1"] = "/bin/init"
	if err := checkImages([]byte(manifest), m, []string{"example.test/proxy:1"}); err != nil {
		t.Errorf("every image is mapped or served, got %v", err)
	}
}

// Tests that rendering config/ sets the operator and proxy images as make deploy does, the
// dedicated proxies' COXSWAIN_PROXY_IMAGE included, without changing the tree. It runs the
// pinned kustomize (KUSTOMIZE, or bin/kustomize-* as `make kustomize` installs it).
func TestRenderSetsImagesWithoutTouchingTheTree(t *testing.T) {
	t.Parallel()
	kustomize := os.Getenv("KUSTOMIZE")
	if kustomize == "" {
		found, _ := filepath.Glob("../../../../bin/kustomize-*")
		if len(found) == 0 {
			t.Skip("no kustomize: run `make kustomize` or set KUSTOMIZE")
		}
		kustomize = found[0]
	}
	kustomize, err := filepath.Abs(kustomize)
	if err != nil {
		t.Fatal(err)
	}
	config, err := filepath.Abs("../../../../config")
	if err != nil {
		t.Fatal(err)
	}
	before := readTree(t, config)
	out, err := render(t.Context(), kustomize, config, t.TempDir(), "", "example.test/operator:7", "example.test/proxy:7")
	if err != nil {
		t.Fatal(err)
	}
	got, err := manifestImages(out)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"example.test/operator:7", "example.test/proxy:7"}, got); diff != "" {
		t.Errorf("images of the rendered manifests (-want +got):\n%s", diff)
	}
	for _, kind := range []string{"kind: CustomResourceDefinition", "kind: Deployment", "name: coxswain-shared-proxy", "name: coxswain-discovery"} {
		if !bytes.Contains(out, []byte(kind)) {
			t.Errorf("rendered manifests lack %q", kind)
		}
	}
	if diff := cmp.Diff(before, readTree(t, config)); diff != "" {
		t.Errorf("rendering changed config/ (-before +after):\n%s", diff)
	}
}

func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path) //nolint:gosec // a file of the tree under test
		files[path] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}
