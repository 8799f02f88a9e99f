package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// registryAddress is where the cluster's registry listens, on the loopback of the cluster's
// network namespace: the node agent pulls from it, nothing outside can.
const registryAddress = "127.0.0.1:5000"

// releaseImagesFile is the list `release images` writes (hack/release: ImagesFile).
const releaseImagesFile = "images.json"

// releaseImage is one entry of images.json: an image index in an OCI image layout.
type releaseImage struct {
	Name string `json:"name"`
	// Layout is the layout's directory relative to the release directory.
	Layout string `json:"layout"`
	// Ref is the tagged reference (coxswain.dev/coxswain:v0.0.0-dev), Digest the index's.
	Ref    string           `json:"ref"`
	Digest string           `json:"digest"`
	Sizes  map[string]int64 `json:"sizes"`
}

// pinned is the reference the manifests run: tag and digest, as install.yaml pins it.
func (img releaseImage) pinned() string { return img.Ref + "@" + img.Digest }

// readRelease reads images.json of dir and checks that it holds the operator and the proxy.
func readRelease(dir string) (map[string]releaseImage, error) {
	data, err := os.ReadFile(filepath.Join(dir, releaseImagesFile)) //nolint:gosec // the release directory we were given
	if err != nil {
		return nil, fmt.Errorf("read the release images (hack/release images): %w", err)
	}
	var list []releaseImage
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("parse %s: %w", releaseImagesFile, err)
	}
	out := map[string]releaseImage{}
	for _, img := range list {
		if _, err := name.NewTag(img.Ref); err != nil {
			return nil, fmt.Errorf("%s: image %s: %w", releaseImagesFile, img.Name, err)
		}
		if _, err := v1.NewHash(img.Digest); err != nil {
			return nil, fmt.Errorf("%s: image %s: %w", releaseImagesFile, img.Name, err)
		}
		out[img.Name] = img
	}
	for _, want := range []string{operatorComponent, proxyComponent} {
		if _, ok := out[want]; !ok {
			return nil, fmt.Errorf("%s of %s has no image %s", releaseImagesFile, dir, want)
		}
	}
	return out, nil
}

// The release's components, as hack/release names them.
const (
	operatorComponent = "coxswain"
	proxyComponent    = "coxswain-proxy"
)

// serveRegistry serves an OCI registry (go-containerregistry's, blobs in memory) on
// registryAddress and pushes every image index of the releases (directory -> its images) into
// it under its own name, so that a pull of coxswain.dev/coxswain:TAG@DIGEST through the registry
// finds it. It returns the registry's address by the registry names the images carry (the node
// agent's --registry values) and the function that stops it.
func serveRegistry(ctx context.Context, releases map[string]map[string]releaseImage, logTo io.Writer) (map[string]string, func() error, error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", registryAddress)
	if err != nil {
		return nil, nil, fmt.Errorf("registry: %w", err)
	}
	srv := &http.Server{
		Handler:           registry.New(registry.Logger(log.New(logTo, "", log.LstdFlags))),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = srv.Serve(ln) }()
	stop := func() error { return srv.Close() }
	served := map[string]string{}
	for dir, images := range releases {
		for _, img := range images {
			if err := pushLayout(ctx, filepath.Join(dir, img.Layout), img); err != nil {
				return nil, nil, errors.Join(err, stop())
			}
			ref, _ := name.NewTag(img.Ref) // checked by readRelease
			served[ref.RegistryStr()] = registryAddress
		}
	}
	return served, stop, nil
}

// pushLayout pushes the image index img names from its layout to the cluster's registry, under
// the repository and tag of its reference.
func pushLayout(ctx context.Context, dir string, img releaseImage) error {
	want, err := v1.NewHash(img.Digest)
	if err != nil {
		return err
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
	ref, err := name.NewTag(img.Ref)
	if err != nil {
		return err
	}
	to, err := name.NewTag(registryAddress+"/"+ref.RepositoryStr()+":"+ref.TagStr(), name.Insecure)
	if err != nil {
		return err
	}
	if err := remote.WriteIndex(to, idx, remote.WithContext(ctx)); err != nil {
		return fmt.Errorf("push %s: %w", img.Ref, err)
	}
	return nil
}

// describeRelease is the progress line's account of the images: reference and compressed size.
func describeRelease(images map[string]releaseImage) string {
	var parts []string
	for _, n := range []string{operatorComponent, proxyComponent} {
		img := images[n]
		var size int64
		for _, s := range img.Sizes {
			size = max(size, s)
		}
		parts = append(parts, fmt.Sprintf("%s (%.1f MiB)", img.pinned(), float64(size)/(1<<20)))
	}
	return strings.Join(parts, ", ")
}
