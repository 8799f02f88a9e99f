package main

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// NonRoot is the user and group every image runs as: distroless's nonroot, numeric so that
// runAsNonRoot can verify it.
const NonRoot = 65532

// Where the images put the system's trusted roots (Go's first place to look on Linux) and the
// search path, as distroless/static does.
const (
	caBundlePath = "etc/ssl/certs/ca-certificates.crt"
	searchPath   = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	homeDir      = "/home/nonroot"
)

// imageMeta is what an image says about itself.
type imageMeta struct {
	Component Component
	Platform  Platform
	Version   string
	Revision  string
	Created   time.Time
}

// labels are the image's OCI annotations-as-labels.
func (m imageMeta) labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       m.Component.Name,
		"org.opencontainers.image.description": m.Component.Description,
		"org.opencontainers.image.version":     m.Version,
		"org.opencontainers.image.revision":    m.Revision,
		"org.opencontainers.image.created":     m.Created.Format(time.RFC3339),
		"org.opencontainers.image.vendor":      "Coxswain",
		"org.opencontainers.image.url":         "https://coxswain.dev",
	}
}

// tarEntry is one file or directory of a layer.
type tarEntry struct {
	name string
	mode int64
	uid  int
	dir  bool
	body []byte
}

// layerOf builds an uncompressed-then-gzipped OCI layer of entries, every one dated at mtime.
func layerOf(entries []tarEntry, mtime time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.uid, ModTime: mtime,
			Typeflag: tar.TypeReg, Size: int64(len(e.body)), Format: tar.FormatPAX,
		}
		if e.dir {
			h.Typeflag, h.Size, h.Name = tar.TypeDir, 0, e.name+"/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("tar header %s: %w", e.name, err)
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, fmt.Errorf("tar body %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close tar: %w", err)
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	return layer, nil
}

// caBundle is the PEM of the unconstrained roots of the NSS trust store, as pinned by the
// x509roots/fallback module: what distroless's ca-certificates carries, reproducibly.
func caBundle() []byte {
	var out bytes.Buffer
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue // a root trusted only with conditions no PEM bundle can carry
		}
		if _, err := x509.ParseCertificate(root.Certificate); err != nil {
			continue
		}
		_ = pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate})
	}
	return out.Bytes()
}

// baseLayer is what every image carries besides its program: the nonroot user and group, its
// home, /tmp and the trusted roots. It is the same for every image of a release.
func baseLayer(mtime time.Time) (v1.Layer, error) {
	return layerOf([]tarEntry{
		{name: "etc", mode: 0o755, dir: true},
		{name: "etc/passwd", mode: 0o644, body: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "etc/group", mode: 0o644, body: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{name: "etc/ssl", mode: 0o755, dir: true},
		{name: "etc/ssl/certs", mode: 0o755, dir: true},
		{name: caBundlePath, mode: 0o644, body: caBundle()},
		{name: "home", mode: 0o755, dir: true},
		{name: "home/nonroot", mode: 0o700, uid: NonRoot, dir: true},
		{name: "tmp", mode: 0o1777, dir: true},
	}, mtime)
}

// buildImage assembles the image of one component for one platform from its static binary.
func buildImage(m imageMeta, binary string, base v1.Layer) (v1.Image, error) {
	program, err := os.ReadFile(binary)
	if err != nil {
		return nil, fmt.Errorf("read binary: %w", err)
	}
	app, err := layerOf([]tarEntry{{name: m.Component.Name, mode: 0o755, body: program}}, m.Created)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{Created: v1.Time{Time: m.Created}, CreatedBy: "coxswain release: nonroot user, /tmp, trusted roots"}},
		mutate.Addendum{Layer: app, MediaType: types.OCILayer, History: v1.History{Created: v1.Time{Time: m.Created}, CreatedBy: "coxswain release: /" + m.Component.Name}},
	)
	if err != nil {
		return nil, fmt.Errorf("append layers: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = m.Platform.OS, m.Platform.Arch, v1.Time{Time: m.Created}
	cf.Config.User = fmt.Sprintf("%d:%d", NonRoot, NonRoot)
	cf.Config.Entrypoint = []string{"/" + m.Component.Name}
	cf.Config.Cmd = nil
	cf.Config.Env = []string{searchPath}
	cf.Config.WorkingDir = homeDir
	cf.Config.Labels = m.labels()
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("set config: %w", err)
	}
	return img, nil
}

// buildIndex assembles one image per platform into an OCI image index.
func buildIndex(meta imageMeta, platforms []Platform, binaries map[Platform]string, base v1.Layer) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var adds []mutate.IndexAddendum
	for _, p := range platforms {
		m := meta
		m.Platform = p
		img, err := buildImage(m, binaries[p], base)
		if err != nil {
			return nil, fmt.Errorf("image %s %s: %w", m.Component.Name, p, err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			MediaType: types.OCIManifestSchema1,
			Platform:  &v1.Platform{OS: p.OS, Architecture: p.Arch},
		}})
	}
	idx = mutate.AppendManifests(idx, adds...)
	return mutate.Annotations(idx, map[string]string{
		"org.opencontainers.image.version":  meta.Version,
		"org.opencontainers.image.revision": meta.Revision,
	}).(v1.ImageIndex), nil
}

// writeLayout writes idx as the OCI image layout dir, its index.json naming it by ref (the
// tagged reference it is pushed as).
func writeLayout(dir string, idx v1.ImageIndex, ref string) error {
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("create layout %s: %w", dir, err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref,
	})); err != nil {
		return fmt.Errorf("write layout %s: %w", dir, err)
	}
	return nil
}
