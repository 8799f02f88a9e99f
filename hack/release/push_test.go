package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// testRelease writes into a new directory what `release build` writes that push reads: the
// layouts of both images (of stand-in binaries), a chart package and release.json, all for
// registry reg.
func testRelease(t *testing.T, reg string) (string, Manifest) {
	t.Helper()
	c := buildConfig{Version: "v1.2.3", Revision: "0123abcd", Registry: reg, Out: t.TempDir(), SourceDate: testDate, Platforms: Platforms}
	for _, comp := range Components {
		for p, src := range fakeBinaries(t, comp) {
			dst := binaryPath(c.Out, comp, p)
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(src, dst); err != nil {
				t.Fatal(err)
			}
		}
	}
	images, err := buildImages(c)
	if err != nil {
		t.Fatal(err)
	}
	m := Manifest{
		Version: c.Version, Revision: c.Revision, Registry: reg, Images: images,
		Chart: ManifestChart{File: "coxswain-1.2.3.tgz", Ref: chartRef(reg, c.Version)},
	}
	if err := os.WriteFile(filepath.Join(c.Out, m.Chart.File), testChartPackage(t), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(filepath.Join(c.Out, manifestFile), m); err != nil {
		t.Fatal(err)
	}
	return c.Out, m
}

// testChartPackage is a minimal packaged chart, as helm package writes one.
func testChartPackage(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for name, body := range map[string]string{
		"coxswain/Chart.yaml":               "apiVersion: v2\nname: coxswain\nversion: 1.2.3\nappVersion: v1.2.3\ndescription: test\n",
		"coxswain/values.yaml":              "{}\n",
		"coxswain/templates/configmap.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: test\n",
	} {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), ModTime: testDate}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestPushToRegistry pushes a release to go-containerregistry's registry, served in process
// over loopback, and reads back what a cluster and helm would pull: both image indexes by the
// digests install.yaml pins, each platform's image, and the chart, which the pinned helm pulls.
func TestPushToRegistry(t *testing.T) {
	srv := httptest.NewServer(registry.New())
	t.Cleanup(srv.Close)
	reg := strings.TrimPrefix(srv.URL, "http://") + "/team"
	dist, m := testRelease(t, reg)
	if err := push(t.Context(), pushConfig{Dist: dist, Registry: reg, Insecure: true}); err != nil {
		t.Fatalf("push: %v", err)
	}
	for _, img := range m.Images {
		ref, err := name.ParseReference(img.Ref, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		idx, err := remote.Index(ref, remote.WithContext(t.Context()))
		if err != nil {
			t.Fatalf("pull %s: %v", img.Ref, err)
		}
		d, err := idx.Digest()
		if err != nil || d.String() != img.Digest {
			t.Errorf("%s pulled as %s (%v), want the pinned %s", img.Ref, d, err, img.Digest)
		}
		pinned, err := name.ParseReference(strings.Split(img.Ref, ":v")[0]+"@"+img.Digest, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range Platforms {
			image, err := remote.Image(pinned, remote.WithContext(t.Context()), remote.WithPlatform(v1.Platform{OS: p.OS, Architecture: p.Arch}))
			if err != nil {
				t.Fatalf("pull %s for %s: %v", pinned, p, err)
			}
			cf, err := image.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cf.Architecture != p.Arch || cf.Config.User != "65532:65532" || cf.Config.Labels["org.opencontainers.image.version"] != "v1.2.3" {
				t.Errorf("%s for %s: arch %s user %q labels %v", pinned, p, cf.Architecture, cf.Config.User, cf.Config.Labels)
			}
		}
	}
	checkChartPushed(t, dist, m)
}

// checkChartPushed reads the chart back as an OCI artifact, then with helm pull.
func checkChartPushed(t *testing.T, dist string, m Manifest) {
	t.Helper()
	want, err := os.ReadFile(filepath.Join(dist, m.Chart.File))
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(m.Chart.Ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(ref, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatalf("pull chart artifact: %v", err)
	}
	mf, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if mf.MediaType != types.OCIManifestSchema1 || mf.Config.MediaType != helmConfigMediaType || len(mf.Layers) != 1 || mf.Layers[0].MediaType != helmContentMediaType {
		t.Fatalf("chart manifest %+v, want Helm's OCI media types", mf)
	}
	helm := os.Getenv("HELM")
	if helm == "" {
		matches, _ := filepath.Glob(filepath.Join("..", "..", "bin", "helm-*"))
		if len(matches) == 0 {
			t.Fatal("helm not found: run `make helm` or set HELM")
		}
		helm = matches[0]
	}
	dir := t.TempDir()
	repo := strings.TrimSuffix(m.Chart.Ref, ":"+chartVersion(m.Version))
	cmd := exec.CommandContext(t.Context(), helm, "pull", "oci://"+repo, "--version", chartVersion(m.Version), "--plain-http", "--destination", dir)
	cmd.Env = append(os.Environ(), "HELM_REGISTRY_CONFIG="+filepath.Join(dir, "registry.json"), "HELM_CACHE_HOME="+filepath.Join(dir, "cache"), "HELM_CONFIG_HOME="+filepath.Join(dir, "config"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helm pull: %v\n%s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(dir, m.Chart.File))
	if err != nil {
		t.Fatalf("helm pull wrote no %s: %v", m.Chart.File, err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("helm pulled %d bytes, want the %d pushed", len(got), len(want))
	}
}

// TestPushRefusesAnotherRegistry: install.yaml and the chart name the registry the release was
// built for, so pushing it elsewhere is refused before anything is sent.
func TestPushRefusesAnotherRegistry(t *testing.T) {
	dist, _ := testRelease(t, "registry.example/team")
	err := push(t.Context(), pushConfig{Dist: dist, Registry: "other.example/team"})
	if err == nil || !strings.Contains(err.Error(), "was built for registry registry.example/team") {
		t.Errorf("push to another registry: %v, want a refusal naming the release's registry", err)
	}
	err = push(t.Context(), pushConfig{Dist: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "run make release first") {
		t.Errorf("push without a release: %v", err)
	}
}
