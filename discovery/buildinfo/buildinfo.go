// Package buildinfo names the release a binary was built from. `make release` stamps Version,
// Revision and ProxyRepository with -ldflags -X, so the operator and the proxy of one release
// print the same version and the operator deploys, by default, the proxy image of its own release.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Stamped at link time (-ldflags "-X coxswain.dev/coxswain/discovery/buildinfo.Version=v1.2.3").
var (
	// Version is the release version, "dev" for a build that is not a release.
	Version = "dev"
	// Revision is the commit the binary was built from; empty when not stamped, in which case
	// the Go toolchain's vcs.revision is used when it recorded one.
	Revision = ""
	// ProxyRepository is the image repository of the proxy of this release, without tag.
	ProxyRepository = "coxswain.dev/coxswain-proxy"
)

// ProxyImage is the proxy image of this release: ProxyRepository tagged with Version.
func ProxyImage() string {
	return ProxyRepository + ":" + Version
}

// CommitRevision returns Revision, or the toolchain's recorded vcs.revision when Revision was not
// stamped, or "unknown".
func CommitRevision() string {
	if Revision != "" {
		return Revision
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				return s.Value
			}
		}
	}
	return "unknown"
}

// String is the line --version prints for the named program.
func String(program string) string {
	return fmt.Sprintf("%s %s (revision %s, %s %s/%s)", program, Version, CommitRevision(),
		runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
