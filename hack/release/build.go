package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Manifest is dist/release.json: what was built, for push and for people.
type Manifest struct {
	Version  string          `json:"version"`
	Revision string          `json:"revision"`
	Registry string          `json:"registry"`
	Images   []ManifestImage `json:"images"`
	Chart    ManifestChart   `json:"chart"`
	Installs []string        `json:"installs"`
}

// ManifestImage is one image index of the release.
type ManifestImage struct {
	Name string `json:"name"`
	// Layout is the OCI image layout directory, relative to dist/.
	Layout string `json:"layout"`
	// Ref is the tagged reference; Digest the image index's digest, which install.yaml pins.
	Ref    string `json:"ref"`
	Digest string `json:"digest"`
	// Sizes are the compressed size of each platform's image (manifest, config and layers).
	Sizes map[string]int64 `json:"sizes"`
}

// ManifestChart is the packaged Helm chart.
type ManifestChart struct {
	File string `json:"file"`
	Ref  string `json:"ref"`
}

// manifestFile is the release manifest's name in dist/.
const manifestFile = "release.json"

// build writes a whole release into c.Out.
func build(ctx context.Context, c buildConfig) error {
	start := time.Now()
	if err := os.RemoveAll(c.Out); err != nil {
		return fmt.Errorf("clear %s: %w", c.Out, err)
	}
	if err := os.MkdirAll(filepath.Join(c.Out, "sbom"), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", c.Out, err)
	}
	if err := buildBinaries(ctx, c); err != nil {
		return err
	}
	if err := checkVersions(ctx, c); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "binaries built in %s\n", time.Since(start).Round(time.Second))
	m := Manifest{Version: c.Version, Revision: c.Revision, Registry: c.Registry}
	images, err := buildImages(c)
	if err != nil {
		return err
	}
	m.Images = images
	refs, digests := map[string]string{}, map[string]string{}
	for _, img := range images {
		refs[img.Name] = img.Ref + "@" + img.Digest
		digests[img.Name] = img.Digest
	}
	if err := renderInstallManifests(ctx, c, refs); err != nil {
		return err
	}
	for _, v := range Variants {
		m.Installs = append(m.Installs, v.File)
	}
	chart, err := packageChart(ctx, c, digests)
	if err != nil {
		return err
	}
	m.Chart = ManifestChart{File: filepath.Base(chart), Ref: chartRef(c.Registry, c.Version)}
	host := Platforms[0]
	for _, comp := range Components {
		sbom := filepath.Join(c.Out, "sbom", comp.Name+".cdx.json")
		if err := writeSBOM(sbom, binaryPath(c.Out, comp, host), comp.Name, c.Version, c.SourceDate); err != nil {
			return err
		}
	}
	if err := writeJSON(filepath.Join(c.Out, manifestFile), m); err != nil {
		return err
	}
	if err := writeChecksums(c.Out); err != nil {
		return err
	}
	for _, img := range m.Images {
		fmt.Fprintf(os.Stderr, "%s@%s sizes %v\n", img.Ref, img.Digest, img.Sizes)
	}
	fmt.Fprintf(os.Stderr, "release %s written to %s in %s\n", c.Version, c.Out, time.Since(start).Round(time.Second))
	return nil
}

// ImagesFile is the list of images `release images` writes into its output directory.
const ImagesFile = "images.json"

// buildImagesOnly writes the stamped binaries and the images of c.Platforms into c.Out, and
// images.json listing them as release.json does.
func buildImagesOnly(ctx context.Context, c buildConfig) error {
	start := time.Now()
	if err := os.RemoveAll(c.Out); err != nil {
		return fmt.Errorf("clear %s: %w", c.Out, err)
	}
	if err := buildBinaries(ctx, c); err != nil {
		return err
	}
	if err := checkVersions(ctx, c); err != nil {
		return err
	}
	images, err := buildImages(c)
	if err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(c.Out, ImagesFile), images); err != nil {
		return err
	}
	for _, img := range images {
		fmt.Fprintf(os.Stderr, "%s@%s sizes %v\n", img.Ref, img.Digest, img.Sizes)
	}
	fmt.Fprintf(os.Stderr, "images %s written to %s in %s\n", c.Version, c.Out, time.Since(start).Round(time.Second))
	return nil
}

// buildImages builds and writes the OCI image layout of every component.
func buildImages(c buildConfig) ([]ManifestImage, error) {
	if len(c.Platforms) == 0 {
		return nil, errors.New("no platform to build images for")
	}
	base, err := baseLayer(c.SourceDate)
	if err != nil {
		return nil, err
	}
	var out []ManifestImage
	for _, comp := range Components {
		binaries := map[Platform]string{}
		for _, p := range c.Platforms {
			binaries[p] = binaryPath(c.Out, comp, p)
		}
		meta := imageMeta{Component: comp, Version: c.Version, Revision: c.Revision, Created: c.SourceDate}
		idx, err := buildIndex(meta, c.Platforms, binaries, base)
		if err != nil {
			return nil, err
		}
		ref := imageRepository(c.Registry, comp.Name) + ":" + c.Version
		dir := filepath.Join("images", comp.Name)
		if err := writeLayout(filepath.Join(c.Out, dir), idx, ref); err != nil {
			return nil, err
		}
		img, err := describeIndex(comp.Name, dir, ref, idx)
		if err != nil {
			return nil, err
		}
		out = append(out, img)
	}
	return out, nil
}

// describeIndex records an image index's digest and each platform's compressed size.
func describeIndex(name, dir, ref string, idx v1.ImageIndex) (ManifestImage, error) {
	digest, err := idx.Digest()
	if err != nil {
		return ManifestImage{}, fmt.Errorf("index digest: %w", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return ManifestImage{}, fmt.Errorf("index manifest: %w", err)
	}
	sizes := map[string]int64{}
	for _, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return ManifestImage{}, fmt.Errorf("image %s: %w", d.Digest, err)
		}
		mf, err := img.Manifest()
		if err != nil {
			return ManifestImage{}, fmt.Errorf("manifest %s: %w", d.Digest, err)
		}
		total := d.Size + mf.Config.Size
		for _, l := range mf.Layers {
			total += l.Size
		}
		sizes[d.Platform.OS+"/"+d.Platform.Architecture] = total
	}
	return ManifestImage{Name: name, Layout: dir, Ref: ref, Digest: digest.String(), Sizes: sizes}, nil
}

// writeJSON writes v as indented JSON.
func writeJSON(path string, v any) error {
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	if err := os.WriteFile(path, append(out, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// checksumsFile lists the SHA-256 of every other file of dist/, as sha256sum -c reads it.
const checksumsFile = "SHA256SUMS"

// writeChecksums writes SHA256SUMS over every file under dir, sorted by path.
func writeChecksums(dir string) error {
	var lines []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == checksumsFile {
			return err
		}
		sum, err := fileSHA256(path)
		if err != nil {
			return err
		}
		lines = append(lines, sum+"  "+filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return fmt.Errorf("checksums: %w", err)
	}
	slices.SortFunc(lines, func(a, b string) int { return strings.Compare(a[66:], b[66:]) })
	if err := os.WriteFile(filepath.Join(dir, checksumsFile), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("write checksums: %w", err)
	}
	return nil
}

// fileSHA256 is the hex SHA-256 of a file's content.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
