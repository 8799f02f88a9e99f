package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Variant is one kustomize variant a release renders an install.yaml of.
type Variant struct {
	// Dir is the kustomization under config/.
	Dir string
	// File is the install manifest's name in dist/.
	File string
}

// Variants are the kustomize variants of a release.
var Variants = []Variant{
	{Dir: "default", File: "install.yaml"},
	{Dir: "overlays/external-ca", File: "install-external-ca.yaml"},
	{Dir: "overlays/cert-manager", File: "install-cert-manager.yaml"},
}

// Where config/ names its two images (the names `make deploy` sets).
var kustomizeImageNames = map[string]string{"coxswain": "controller", "coxswain-proxy": "proxy"}

// Where config/ sets each image, relative to config/.
var kustomizeImageDirs = map[string]string{"coxswain": "manager", "coxswain-proxy": "proxy"}

// renderInstallManifests renders every variant from a copy of config/ in which the images are
// set, as `make deploy` sets them, to refs (component name -> repository:tag@digest).
func renderInstallManifests(ctx context.Context, c buildConfig, refs map[string]string) error {
	tmp, err := os.MkdirTemp("", "coxswain-release-config-")
	if err != nil {
		return fmt.Errorf("temporary directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	config := filepath.Join(tmp, "config")
	if err := os.CopyFS(config, os.DirFS(filepath.Join(c.Root, "config"))); err != nil {
		return fmt.Errorf("copy config: %w", err)
	}
	for _, comp := range Components {
		arg := kustomizeImageNames[comp.Name] + "=" + refs[comp.Name]
		if _, err := runTool(ctx, filepath.Join(config, kustomizeImageDirs[comp.Name]), c.Kustomize, "edit", "set", "image", arg); err != nil {
			return err
		}
	}
	for _, v := range Variants {
		out, err := runTool(ctx, config, c.Kustomize, "build", v.Dir)
		if err != nil {
			return err
		}
		if err := checkPinned(out, refs); err != nil {
			return fmt.Errorf("%s: %w", v.File, err)
		}
		if err := os.WriteFile(filepath.Join(c.Out, v.File), out, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", v.File, err)
		}
	}
	return nil
}

// checkPinned fails when a rendered manifest still names an image of ours by anything but its
// pinned reference: every "image:" value and every mention of our repositories must be a ref.
func checkPinned(manifest []byte, refs map[string]string) error {
	text := string(manifest)
	for _, ref := range refs {
		text = strings.ReplaceAll(text, ref, "")
	}
	for _, stale := range []string{"coxswain.dev/coxswain:", "coxswain.dev/coxswain-proxy:", "image: controller", "image: proxy"} {
		if strings.Contains(text, stale) {
			return fmt.Errorf("an image is not pinned: %q remains", stale)
		}
	}
	for _, ref := range refs {
		if !bytes.Contains(manifest, []byte(ref)) {
			return fmt.Errorf("%s is not used", ref)
		}
	}
	return nil
}

// runTool runs a tool in dir and returns its standard output.
func runTool(ctx context.Context, dir, tool string, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, tool, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", filepath.Base(tool), strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// copyTree copies the directory src to dst.
func copyTree(dst, src string) error {
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return nil
}
