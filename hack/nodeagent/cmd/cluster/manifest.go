package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"coxswain.dev/coxswain/hack/nodeagent/internal/image"
)

// render builds the manifests of `make deploy` without touching the tree: it copies config/
// into tmp, sets the operator and proxy images there as make deploy does
// (`kustomize edit set image controller=IMG` in manager/, `proxy=PROXY_IMG` in proxy/), and
// returns `kustomize build` of the copy's default/ (or overlays/<overlay>).
func render(ctx context.Context, kustomize, config, tmp, overlay, operatorImage, proxyImage string) ([]byte, error) {
	dst := filepath.Join(tmp, "config")
	if err := copyTree(config, dst); err != nil {
		return nil, fmt.Errorf("copy %s: %w", config, err)
	}
	for _, edit := range [][2]string{{"manager", "controller=" + operatorImage}, {"proxy", "proxy=" + proxyImage}} {
		if _, err := runTool(ctx, filepath.Join(dst, edit[0]), kustomize, "edit", "set", "image", edit[1]); err != nil {
			return nil, err
		}
	}
	dir := filepath.Join(dst, "default")
	if overlay != "" {
		dir = filepath.Join(dst, "overlays", overlay)
	}
	return runTool(ctx, dst, kustomize, "build", dir)
}

func runTool(ctx context.Context, dir, name string, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", filepath.Base(name), strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}

// manifestImages lists the images a multi-document manifest runs: the image of every
// container and init container of the pod templates (Deployments, DaemonSets, StatefulSets,
// ReplicaSets, Jobs) and pods, and the value of every COXSWAIN_PROXY_IMAGE variable (the image
// the operator gives the dedicated proxies). Sorted, without duplicates.
func manifestImages(manifest []byte) ([]string, error) {
	var images []string
	for i, doc := range splitDocuments(manifest) {
		var obj struct {
			Kind string `json:"kind"`
			Spec struct {
				podSpec
				Template struct {
					Spec podSpec `json:"spec"`
				} `json:"template"`
				JobTemplate struct {
					Spec struct {
						Template struct {
							Spec podSpec `json:"spec"`
						} `json:"template"`
					} `json:"spec"`
				} `json:"jobTemplate"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, fmt.Errorf("manifest document %d: %w", i+1, err)
		}
		for _, ps := range []podSpec{obj.Spec.podSpec, obj.Spec.Template.Spec, obj.Spec.JobTemplate.Spec.Template.Spec} {
			images = append(images, ps.images()...)
		}
	}
	slices.Sort(images)
	return slices.Compact(images), nil
}

type container struct {
	Image string `json:"image"`
	Env   []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"env"`
}

type podSpec struct {
	Containers     []container `json:"containers"`
	InitContainers []container `json:"initContainers"`
}

func (ps podSpec) images() []string {
	var out []string
	for _, c := range slices.Concat(ps.InitContainers, ps.Containers) {
		if c.Image != "" {
			out = append(out, c.Image)
		}
		for _, e := range c.Env {
			if e.Name == "COXSWAIN_PROXY_IMAGE" && e.Value != "" {
				out = append(out, e.Value)
			}
		}
	}
	return out
}

// splitDocuments splits a YAML stream at its `---` lines, dropping empty documents.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	var cur []string
	flush := func() {
		doc := strings.Join(cur, "\n")
		if strings.TrimSpace(doc) != "" {
			docs = append(docs, []byte(doc))
		}
		cur = cur[:0]
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "---") && strings.TrimSpace(strings.TrimPrefix(line, "---")) == "" {
			flush()
			continue
		}
		cur = append(cur, line)
	}
	flush()
	return docs
}

// checkImages fails, naming them, when the manifest runs images the map has no binary for:
// their pods would wait forever for an image the node cannot run.
func checkImages(manifest []byte, m image.Map, served []string) error {
	images, err := manifestImages(manifest)
	if err != nil {
		return err
	}
	var missing []string
	for _, img := range images {
		if slices.Contains(served, img) {
			continue
		}
		if _, err := m.Resolve(img); err != nil {
			missing = append(missing, img)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the manifests run images neither the release's registry serves nor the image map names: %s (add `IMAGE PATH` lines with --images)", strings.Join(missing, ", "))
	}
	return nil
}

// copyTree copies the regular files and directories under src to dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o750)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		in, err := os.Open(path) //nolint:gosec // a file of the tree being copied
		if err != nil {
			return err
		}
		defer in.Close() //nolint:errcheck // read only

		out, err := os.Create(target) //nolint:gosec // inside the temporary copy
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			_ = out.Close()
			return err
		}
		return out.Close()
	})
}
