package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// ChartName is the Helm chart's name (charts/<name>).
const ChartName = "coxswain"

// releaseMarker ends the values.yaml lines the release rewrites: "# release: <component>".
var releaseMarker = regexp.MustCompile(`(?m)^(\s*)(repository|digest): .*# release: ([a-z-]+)$`)

// pinChartValues rewrites the marked repository and digest lines of a chart's values.yaml to the
// release's images: repository under the release's registry, digest the image index's.
func pinChartValues(values []byte, registry string, digests map[string]string) ([]byte, error) {
	seen := map[string]int{}
	var bad error
	out := releaseMarker.ReplaceAllFunc(values, func(line []byte) []byte {
		m := releaseMarker.FindSubmatch(line)
		indent, key, comp := string(m[1]), string(m[2]), string(m[3])
		d, ok := digests[comp]
		if !ok {
			bad = fmt.Errorf("values.yaml marks unknown component %q", comp)
			return line
		}
		seen[comp+"/"+key]++
		value := imageRepository(registry, comp)
		if key == "digest" {
			value = d
		}
		return fmt.Appendf(nil, "%s%s: %q # release: %s", indent, key, value, comp)
	})
	if bad != nil {
		return nil, bad
	}
	for comp := range digests {
		for _, key := range []string{"repository", "digest"} {
			if seen[comp+"/"+key] != 1 {
				return nil, fmt.Errorf("values.yaml marks %s of %s %d times, want once", key, comp, seen[comp+"/"+key])
			}
		}
	}
	return out, nil
}

// packageChart packages charts/coxswain with the release's version and pinned images into out
// and returns the package's path.
func packageChart(ctx context.Context, c buildConfig, digests map[string]string) (string, error) {
	tmp, err := os.MkdirTemp("", "coxswain-release-chart-")
	if err != nil {
		return "", fmt.Errorf("temporary directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	chart := filepath.Join(tmp, ChartName)
	if err := copyTree(chart, filepath.Join(c.Root, "charts", ChartName)); err != nil {
		return "", err
	}
	valuesPath := filepath.Join(chart, "values.yaml")
	values, err := os.ReadFile(valuesPath)
	if err != nil {
		return "", fmt.Errorf("read values: %w", err)
	}
	pinned, err := pinChartValues(values, c.Registry, digests)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(valuesPath, pinned, 0o644); err != nil {
		return "", fmt.Errorf("write values: %w", err)
	}
	if _, err := runTool(ctx, tmp, c.Helm, "lint", "--strict", chart); err != nil {
		return "", err
	}
	out, err := filepath.Abs(c.Out)
	if err != nil {
		return "", fmt.Errorf("output directory: %w", err)
	}
	if _, err := runTool(ctx, tmp, c.Helm, "package", chart, "--version", chartVersion(c.Version),
		"--app-version", c.Version, "--destination", out); err != nil {
		return "", err
	}
	pkg := filepath.Join(out, ChartName+"-"+chartVersion(c.Version)+".tgz")
	return pkg, checkChartPinned(ctx, c, pkg, digests)
}

// checkChartPinned renders the packaged chart in each CA mode and checks, as for install.yaml,
// that every image of ours it names is the release's, pinned by digest.
func checkChartPinned(ctx context.Context, c buildConfig, pkg string, digests map[string]string) error {
	refs := map[string]string{}
	for comp, d := range digests {
		refs[comp] = imageRepository(c.Registry, comp) + ":" + c.Version + "@" + d
	}
	for _, values := range [][]string{nil, {"discovery.ca.mode=external", "discovery.ca.certManager.enabled=true"}} {
		args := []string{"template", ChartName, pkg, "--namespace", "coxswain-system", "--kube-version", "1.36.0"}
		for _, v := range values {
			args = append(args, "--set", v)
		}
		out, err := runTool(ctx, filepath.Dir(pkg), c.Helm, args...)
		if err != nil {
			return err
		}
		if err := checkPinned(out, refs); err != nil {
			return fmt.Errorf("the packaged chart (values %v): %w", values, err)
		}
	}
	return nil
}

// chartRef is the OCI reference the chart is pushed as (what helm push would name it).
func chartRef(registry, version string) string {
	return strings.Join([]string{registry, "charts", ChartName}, "/") + ":" + chartVersion(version)
}
