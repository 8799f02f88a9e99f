package main

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var testDate = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeBinaries writes a small file per platform standing in for a static binary.
func fakeBinaries(t *testing.T, comp Component) map[Platform]string {
	t.Helper()
	out := map[Platform]string{}
	for _, p := range Platforms {
		path := filepath.Join(t.TempDir(), comp.Name)
		if err := os.WriteFile(path, []byte("#!binary "+comp.Name+" "+p.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		out[p] = path
	}
	return out
}

func testIndex(t *testing.T, comp Component) v1.ImageIndex {
	t.Helper()
	base, err := baseLayer(testDate)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := buildIndex(imageMeta{Component: comp, Version: "v1.2.3", Revision: "0123abcd", Created: testDate}, Platforms, fakeBinaries(t, comp), base)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

// TestImageRunsAsTheDockerfileImage checks what each platform's image says about how it runs:
// what Dockerfile and Dockerfile.proxy give on distroless/static:nonroot (user 65532, the
// binary as entrypoint, nonroot's home as working directory) plus the OCI labels.
func TestImageRunsAsTheDockerfileImage(t *testing.T) {
	for _, comp := range Components {
		idx := testIndex(t, comp)
		mt, err := idx.MediaType()
		if err != nil || mt != types.OCIImageIndex {
			t.Errorf("%s index media type %q (%v), want %q", comp.Name, mt, err, types.OCIImageIndex)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		var platforms []string
		for _, d := range im.Manifests {
			platforms = append(platforms, d.Platform.OS+"/"+d.Platform.Architecture)
			img, err := idx.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cf.OS != d.Platform.OS || cf.Architecture != d.Platform.Architecture {
				t.Errorf("%s: config platform %s/%s under index platform %s/%s", comp.Name, cf.OS, cf.Architecture, d.Platform.OS, d.Platform.Architecture)
			}
			want := v1.Config{
				User:       "65532:65532",
				Entrypoint: []string{"/" + comp.Name},
				Env:        []string{searchPath},
				WorkingDir: "/home/nonroot",
				Labels: map[string]string{
					"org.opencontainers.image.title":       comp.Name,
					"org.opencontainers.image.description": comp.Description,
					"org.opencontainers.image.version":     "v1.2.3",
					"org.opencontainers.image.revision":    "0123abcd",
					"org.opencontainers.image.created":     "2026-01-02T03:04:05Z",
					"org.opencontainers.image.vendor":      "Coxswain",
					"org.opencontainers.image.url":         "https://coxswain.dev",
				},
			}
			if diff := cmp.Diff(want, cf.Config); diff != "" {
				t.Errorf("%s %s config (-want +got):\n%s", comp.Name, cf.Architecture, diff)
			}
			checkLayers(t, img, comp, d.Platform.Architecture)
		}
		if diff := cmp.Diff([]string{"linux/amd64", "linux/arm64"}, platforms); diff != "" {
			t.Errorf("%s platforms (-want +got):\n%s", comp.Name, diff)
		}
	}
}

// checkLayers reads the image's filesystem: the nonroot user, a sticky /tmp, a non-empty CA
// bundle, and the program executable at the entrypoint, every file owned by root but the home.
func checkLayers(t *testing.T, img v1.Image, comp Component, arch string) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*tar.Header{}
	contents := map[string][]byte{}
	for _, l := range layers {
		mt, err := l.MediaType()
		if err != nil || mt != types.OCILayer {
			t.Errorf("layer media type %q (%v), want %q", mt, err, types.OCILayer)
		}
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name], contents[h.Name] = h, body
		}
		_ = rc.Close()
	}
	for name, want := range map[string]struct {
		mode int64
		uid  int
	}{
		"tmp/": {0o1777, 0}, "home/nonroot/": {0o700, NonRoot}, "etc/passwd": {0o644, 0}, caBundlePath: {0o644, 0}, comp.Name: {0o755, 0},
	} {
		h, ok := files[name]
		switch {
		case !ok:
			t.Errorf("%s %s: no %s in the image", comp.Name, arch, name)
		case h.Mode != want.mode || h.Uid != want.uid || !h.ModTime.Equal(testDate):
			t.Errorf("%s %s: %s mode %o uid %d time %s, want %o %d %s", comp.Name, arch, name, h.Mode, h.Uid, h.ModTime, want.mode, want.uid, testDate)
		}
	}
	if got, want := string(contents[comp.Name]), "#!binary "+comp.Name+" linux/"+arch; got != want {
		t.Errorf("%s %s: program %q, want the %s binary", comp.Name, arch, got, arch)
	}
	if len(contents[caBundlePath]) < 100_000 {
		t.Errorf("%s: CA bundle of %d bytes, want the NSS roots", comp.Name, len(contents[caBundlePath]))
	}
}

// TestImagesAreReproducible builds the same index twice: the same inputs give the same digest.
func TestImagesAreReproducible(t *testing.T) {
	comp := Components[1]
	bins := fakeBinaries(t, comp)
	digest := func() v1.Hash {
		base, err := baseLayer(testDate)
		if err != nil {
			t.Fatal(err)
		}
		idx, err := buildIndex(imageMeta{Component: comp, Version: "v1.2.3", Revision: "r", Created: testDate}, Platforms, bins, base)
		if err != nil {
			t.Fatal(err)
		}
		d, err := idx.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if a, b := digest(), digest(); a != b {
		t.Errorf("two builds of the same inputs: %s and %s", a, b)
	}
}

// TestWriteLayoutReadsBack writes an index as an OCI image layout and reads it back.
func TestWriteLayoutReadsBack(t *testing.T) {
	idx := testIndex(t, Components[0])
	dir := filepath.Join(t.TempDir(), "layout")
	if err := writeLayout(dir, idx, "registry.example/coxswain:v1.2.3"); err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	outer, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	om, err := outer.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := idx.Digest()
	if len(om.Manifests) != 1 || om.Manifests[0].Digest != want || om.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "registry.example/coxswain:v1.2.3" {
		t.Fatalf("layout index.json %+v, want the index %s named by its ref", om.Manifests, want)
	}
	if _, err := outer.ImageIndex(want); err != nil {
		t.Errorf("the layout's index does not read back: %v", err)
	}
}
