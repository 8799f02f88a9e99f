// Command release builds and publishes a Coxswain release without Docker.
//
//	release build --version v1.2.3 --revision <commit> --registry coxswain.dev --out dist
//	release push  --dist dist [--registry R]
//	release images --revision <commit> [--platforms linux/amd64] --out bin/cluster/release
//
// build cross-compiles the operator and the proxy as static binaries (CGO_ENABLED=0) for
// linux/amd64 and linux/arm64, assembles them into OCI images with go-containerregistry (an OCI
// image layout per image holding one image index over both platforms), renders install.yaml for
// each kustomize variant with the images pinned by digest, packages the Helm chart with the same
// digests, writes a CycloneDX SBOM of each binary's Go modules, and lists every file's SHA-256 in
// SHA256SUMS. push uploads the two image indexes and the chart (as a Helm OCI artifact) to a
// registry. images builds only the images (this machine's platform by default), as the local
// cluster runs them, and lists them in images.json. See docs/release.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: release build|push|images [flags]")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	switch args[0] {
	case "build":
		cfg, err := parseBuildFlags(args[1:])
		if err != nil {
			return err
		}
		return build(ctx, cfg)
	case "push":
		fs := flag.NewFlagSet("push", flag.ContinueOnError)
		dist := fs.String("dist", "dist", "Directory `make release` wrote.")
		registry := fs.String("registry", "", "Registry to push to; the one the release was built for when empty (install.yaml and the chart name it).")
		insecure := fs.Bool("insecure", false, "Speak plain HTTP to the registry (a local test registry only).")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		return push(ctx, pushConfig{Dist: *dist, Registry: *registry, Insecure: *insecure})
	case "images":
		cfg, err := parseImagesFlags(args[1:])
		if err != nil {
			return err
		}
		return buildImagesOnly(ctx, cfg)
	default:
		return fmt.Errorf("unknown command %q: build, push or images", args[0])
	}
}
