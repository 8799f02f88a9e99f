package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"sigs.k8s.io/yaml"
)

// The media types of a Helm chart stored in an OCI registry (helm push, helm pull).
const (
	helmConfigMediaType  types.MediaType = "application/vnd.cncf.helm.config.v1+json"
	helmContentMediaType types.MediaType = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
)

// pushConfig is what `release push` is told.
type pushConfig struct {
	Dist     string
	Registry string
	Insecure bool
}

// push uploads the release in c.Dist: both image indexes, then the chart.
func push(ctx context.Context, c pushConfig) error {
	var m Manifest
	raw, err := os.ReadFile(filepath.Join(c.Dist, manifestFile))
	if err != nil {
		return fmt.Errorf("read the release manifest (run make release first): %w", err)
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("parse %s: %w", manifestFile, err)
	}
	if c.Registry != "" && c.Registry != m.Registry {
		return fmt.Errorf("the release in %s was built for registry %s, which its install.yaml and chart name; "+
			"rebuild it with REGISTRY=%s to push there", c.Dist, m.Registry, c.Registry)
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	var nameOpts []name.Option
	if c.Insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	for _, img := range m.Images {
		if err := pushIndex(filepath.Join(c.Dist, img.Layout), img, nameOpts, opts); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "pushed %s@%s\n", img.Ref, img.Digest)
	}
	if err := pushChart(filepath.Join(c.Dist, m.Chart.File), m.Chart.Ref, nameOpts, opts); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "pushed oci://%s\n", m.Chart.Ref)
	return nil
}

// pushIndex pushes the image index of an OCI image layout as img.Ref, checking that it is the
// index the release pinned.
func pushIndex(dir string, img ManifestImage, nameOpts []name.Option, opts []remote.Option) error {
	ref, err := name.NewTag(img.Ref, nameOpts...)
	if err != nil {
		return fmt.Errorf("image reference %s: %w", img.Ref, err)
	}
	want, err := v1.NewHash(img.Digest)
	if err != nil {
		return fmt.Errorf("digest of %s: %w", img.Name, err)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return fmt.Errorf("open layout %s: %w", dir, err)
	}
	outer, err := p.ImageIndex()
	if err != nil {
		return fmt.Errorf("read layout %s: %w", dir, err)
	}
	idx, err := outer.ImageIndex(want)
	if err != nil {
		return fmt.Errorf("layout %s holds no index %s: %w", dir, want, err)
	}
	if err := remote.WriteIndex(ref, idx, opts...); err != nil {
		return fmt.Errorf("push %s: %w", img.Ref, err)
	}
	return nil
}

// rawManifest is a manifest pushed as its bytes.
type rawManifest struct {
	body      []byte
	mediaType types.MediaType
}

func (r rawManifest) RawManifest() ([]byte, error)        { return r.body, nil }
func (r rawManifest) MediaType() (types.MediaType, error) { return r.mediaType, nil }

// pushChart pushes a packaged chart as the OCI artifact helm push makes: a config of the chart's
// metadata as JSON, one layer of the package.
func pushChart(file, ref string, nameOpts []name.Option, opts []remote.Option) error {
	tag, err := name.NewTag(ref, nameOpts...)
	if err != nil {
		return fmt.Errorf("chart reference %s: %w", ref, err)
	}
	pkg, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("read chart: %w", err)
	}
	meta, err := chartMetadataJSON(pkg)
	if err != nil {
		return err
	}
	config, content := static.NewLayer(meta, helmConfigMediaType), static.NewLayer(pkg, helmContentMediaType)
	manifest := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1}
	for i, l := range []v1.Layer{config, content} {
		if err := remote.WriteLayer(tag.Repository, l, opts...); err != nil {
			return fmt.Errorf("push chart blob: %w", err)
		}
		d, err := descriptorOf(l)
		if err != nil {
			return err
		}
		if i == 0 {
			manifest.Config = d
		} else {
			manifest.Layers = []v1.Descriptor{d}
		}
	}
	body, err := json.Marshal(manifest)
	if err != nil {
		return fmt.Errorf("encode chart manifest: %w", err)
	}
	if err := remote.Put(tag, rawManifest{body: body, mediaType: types.OCIManifestSchema1}, opts...); err != nil {
		return fmt.Errorf("push chart manifest %s: %w", ref, err)
	}
	return nil
}

// descriptorOf describes a static blob.
func descriptorOf(l v1.Layer) (v1.Descriptor, error) {
	d, err := l.Digest()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("blob digest: %w", err)
	}
	size, err := l.Size()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("blob size: %w", err)
	}
	mt, err := l.MediaType()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("blob media type: %w", err)
	}
	return v1.Descriptor{MediaType: mt, Digest: d, Size: size}, nil
}

// errNoChartYAML is returned for a package without <chart>/Chart.yaml.
var errNoChartYAML = errors.New("the chart package holds no Chart.yaml")

// chartMetadataJSON returns the Chart.yaml of a packaged chart as JSON, the config of a chart in
// an OCI registry.
func chartMetadataJSON(pkg []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(pkg))
	if err != nil {
		return nil, fmt.Errorf("chart package: %w", err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, errNoChartYAML
		}
		if err != nil {
			return nil, fmt.Errorf("chart package: %w", err)
		}
		if path.Base(h.Name) != "Chart.yaml" || path.Dir(h.Name) != ChartName {
			continue
		}
		raw, err := io.ReadAll(io.LimitReader(tr, 1<<20))
		if err != nil {
			return nil, fmt.Errorf("read Chart.yaml: %w", err)
		}
		out, err := yaml.YAMLToJSON(raw)
		if err != nil {
			return nil, fmt.Errorf("parse the chart metadata: %w", err)
		}
		return out, nil
	}
}
