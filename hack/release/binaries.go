package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// buildinfoPkg is the package whose variables the linker stamps with the release.
const buildinfoPkg = "coxswain.dev/coxswain/discovery/buildinfo"

// ldflags strips the symbol table, drops the build ID so the binaries are reproducible, and
// stamps the version, the revision and the proxy's image repository into both programs.
func ldflags(c buildConfig) string {
	return strings.Join([]string{
		"-s", "-w", "-buildid=",
		"-X", buildinfoPkg + ".Version=" + c.Version,
		"-X", buildinfoPkg + ".Revision=" + c.Revision,
		"-X", buildinfoPkg + ".ProxyRepository=" + imageRepository(c.Registry, "coxswain-proxy"),
	}, " ")
}

// binaryPath is where the binary of comp for p is written under out.
func binaryPath(out string, comp Component, p Platform) string {
	return filepath.Join(out, "bin", p.dir(), comp.Name)
}

// buildBinaries cross-compiles every component for every platform as static binaries.
func buildBinaries(ctx context.Context, c buildConfig) error {
	for _, p := range c.Platforms {
		for _, comp := range Components {
			out, err := filepath.Abs(binaryPath(c.Out, comp, p))
			if err != nil {
				return fmt.Errorf("binary path: %w", err)
			}
			cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags(c), "-o", out, ".")
			cmd.Dir = filepath.Join(c.Root, comp.ModuleDir)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Arch, "GOFLAGS=-mod=readonly")
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("go build %s for %s: %w", comp.Name, p, err)
			}
		}
	}
	return nil
}

// checkVersions runs each binary built for this machine with --version and checks that it names
// the release and its revision.
func checkVersions(ctx context.Context, c buildConfig) error {
	host := Platform{OS: runtime.GOOS, Arch: runtime.GOARCH}
	for _, comp := range Components {
		bin := binaryPath(c.Out, comp, host)
		if _, err := os.Stat(bin); err != nil {
			return nil //nolint:nilerr // no binary for this machine's platform: nothing to run
		}
		var stdout bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, "--version")
		cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s --version: %w", comp.Name, err)
		}
		want := fmt.Sprintf("%s %s (revision %s,", comp.Name, c.Version, c.Revision)
		if !strings.HasPrefix(stdout.String(), want) {
			return fmt.Errorf("%s --version printed %q, want it to start with %q", comp.Name, stdout.String(), want)
		}
	}
	return checkDefaultProxyImage(ctx, c, binaryPath(c.Out, Components[0], host))
}

// checkDefaultProxyImage reads the operator's --help: the default of --proxy-image must be the
// proxy of this release.
func checkDefaultProxyImage(ctx context.Context, c buildConfig, operator string) error {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, operator, "--help")
	cmd.Env = []string{} // the defaults, not this environment's COXSWAIN_PROXY_IMAGE
	cmd.Stderr = &stderr
	_ = cmd.Run() // --help exits 0 or 2 depending on the flag package; the text is what counts
	want := fmt.Sprintf("(default %q)", imageRepository(c.Registry, "coxswain-proxy")+":"+c.Version)
	if !strings.Contains(stderr.String(), want) {
		return fmt.Errorf("the operator's --help does not give --proxy-image %s", want)
	}
	return nil
}
