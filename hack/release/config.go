package main

import (
	"errors"
	"flag"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Platforms are the platforms every release image is built for.
var Platforms = []Platform{{OS: "linux", Arch: "amd64"}, {OS: "linux", Arch: "arm64"}}

// Platform is an operating system and CPU architecture.
type Platform struct {
	OS, Arch string
}

func (p Platform) String() string { return p.OS + "/" + p.Arch }

// dir is the platform's directory name under dist/bin.
func (p Platform) dir() string { return p.OS + "_" + p.Arch }

// Component is one program of the release and the image that carries it.
type Component struct {
	// Name is the program's and the image repository's last element.
	Name string
	// ModuleDir is the module directory it is built from, relative to the repository root.
	ModuleDir string
	// Description is the image's org.opencontainers.image.description.
	Description string
}

// Components are the release's two programs.
var Components = []Component{
	{Name: "coxswain", ModuleDir: ".", Description: "Coxswain operator: Gateway API controller and discovery server"},
	{Name: "coxswain-proxy", ModuleDir: "proxy", Description: "Coxswain proxy: the data plane, configured over the mTLS discovery stream"},
}

// buildConfig is what `release build` is told.
type buildConfig struct {
	Version    string
	Revision   string
	Registry   string
	Root       string
	Out        string
	Kustomize  string
	Helm       string
	SourceDate time.Time
	// Platforms are the platforms built: every release platform for `build`, the ones asked
	// for (this machine's by default) for `images`.
	Platforms []Platform
}

// semver is the form a release version takes: v, three numbers, an optional pre-release.
var semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

func parseBuildFlags(args []string) (buildConfig, error) {
	var c buildConfig
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	sourceDate := commonFlags(fs, &c, "")
	fs.StringVar(&c.Kustomize, "kustomize", "kustomize", "The pinned kustomize binary.")
	fs.StringVar(&c.Helm, "helm", "helm", "The pinned helm binary.")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if err := sourceDate(); err != nil {
		return c, err
	}
	c.Platforms = Platforms
	return c, c.validate()
}

// parseImagesFlags reads the flags of `release images`: the release's images for the platforms
// asked for, without its manifests, chart and SBOMs, as the local cluster runs them.
func parseImagesFlags(args []string) (buildConfig, error) {
	var c buildConfig
	var platforms string
	fs := flag.NewFlagSet("images", flag.ContinueOnError)
	sourceDate := commonFlags(fs, &c, DevVersion)
	fs.StringVar(&platforms, "platforms", runtime.GOOS+"/"+runtime.GOARCH, "Comma-separated OS/ARCH list, each one of the release's platforms.")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if err := sourceDate(); err != nil {
		return c, err
	}
	var err error
	if c.Platforms, err = parsePlatforms(platforms); err != nil {
		return c, err
	}
	return c, c.validate()
}

// commonFlags registers the flags build and images share on fs, into c; the function it
// returns sets c.SourceDate from --source-date-epoch once fs is parsed.
func commonFlags(fs *flag.FlagSet, c *buildConfig, version string) func() error {
	var epoch string
	fs.StringVar(&c.Version, "version", version, "Release version, vMAJOR.MINOR.PATCH[-PRERELEASE], stamped into the binaries and the images' tags.")
	fs.StringVar(&c.Revision, "revision", "", "Commit the release is built from.")
	fs.StringVar(&c.Registry, "registry", "coxswain.dev", "Registry (and path) the images and the chart are named under.")
	fs.StringVar(&c.Root, "root", ".", "The repository's root directory.")
	fs.StringVar(&c.Out, "out", "dist", "Output directory; replaced.")
	fs.StringVar(&epoch, "source-date-epoch", "0", "Unix time of every file and of the images' creation (the commit's time), for reproducible images.")
	return func() error {
		secs, err := strconv.ParseInt(epoch, 10, 64)
		if err != nil {
			return fmt.Errorf("--source-date-epoch: %w", err)
		}
		c.SourceDate = time.Unix(secs, 0).UTC()
		return nil
	}
}

// DevVersion is the version of images built from a working tree rather than for a release.
const DevVersion = "v0.0.0-dev"

// parsePlatforms reads OS/ARCH[,OS/ARCH...], each one of Platforms, in Platforms' order.
func parsePlatforms(list string) ([]Platform, error) {
	want := map[Platform]bool{}
	for item := range strings.SplitSeq(list, ",") {
		osName, arch, ok := strings.Cut(strings.TrimSpace(item), "/")
		p := Platform{OS: osName, Arch: arch}
		if !ok || !slices.Contains(Platforms, p) {
			return nil, fmt.Errorf("--platforms: %q is not one of the release's platforms %v", item, Platforms)
		}
		want[p] = true
	}
	var out []Platform
	for _, p := range Platforms {
		if want[p] {
			out = append(out, p)
		}
	}
	return out, nil
}

func (c buildConfig) validate() error {
	var errs []error
	if !semver.MatchString(c.Version) {
		errs = append(errs, fmt.Errorf("--version %q is not vMAJOR.MINOR.PATCH[-PRERELEASE]", c.Version))
	}
	if c.Revision == "" || strings.ContainsAny(c.Revision, " \t\n\"'") {
		errs = append(errs, fmt.Errorf("--revision %q: want the commit's hash", c.Revision))
	}
	if c.Registry == "" || strings.HasSuffix(c.Registry, "/") || strings.Contains(c.Registry, "://") {
		errs = append(errs, fmt.Errorf("--registry %q: want host[:port][/path], no scheme, no trailing slash", c.Registry))
	}
	return errors.Join(errs...)
}

// chartVersion is the Helm chart's version: the release version without its v.
func chartVersion(version string) string { return strings.TrimPrefix(version, "v") }

// imageRepository is the repository of component name under registry.
func imageRepository(registry, name string) string { return registry + "/" + name }
