package boundary

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// RootModule is the operator's module path.
const RootModule = "coxswain.dev/coxswain"

// forbiddenPrefixes are import path prefixes the discovery and proxy modules must not reach.
var forbiddenPrefixes = []string{"k8s.io/client-go", "sigs.k8s.io/controller-runtime"}

// Package is one dependency as `go list` reports it.
type Package struct {
	ImportPath string
	Module     string
}

// ListDeps lists every package the module in dir builds, its tests included.
func ListDeps(ctx context.Context, dir string) ([]Package, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-test", "-f", "{{.ImportPath}} {{with .Module}}{{.Path}}{{end}}", "./...")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list in %s: %w: %s", dir, err, stderr.String())
	}
	var pkgs []Package
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		path, module, _ := strings.Cut(sc.Text(), " ")
		pkgs = append(pkgs, Package{ImportPath: path, Module: module})
	}
	return pkgs, sc.Err()
}

// Violations returns the packages of pkgs that break the rule.
func Violations(pkgs []Package) []string {
	var bad []string
	for _, p := range pkgs {
		if p.Module == RootModule {
			bad = append(bad, p.ImportPath+" (the operator's root module)")
			continue
		}
		for _, prefix := range forbiddenPrefixes {
			if p.ImportPath == prefix || strings.HasPrefix(p.ImportPath, prefix+"/") {
				bad = append(bad, p.ImportPath)
			}
		}
	}
	return bad
}
