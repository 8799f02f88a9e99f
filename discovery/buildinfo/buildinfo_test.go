package buildinfo

import (
	"runtime"
	"strings"
	"testing"
)

func TestProxyImageFollowsVersion(t *testing.T) {
	oldV, oldR := Version, ProxyRepository
	t.Cleanup(func() { Version, ProxyRepository = oldV, oldR })
	if got, want := ProxyImage(), "coxswain.dev/coxswain-proxy:dev"; got != want {
		t.Errorf("unstamped ProxyImage() = %q, want %q", got, want)
	}
	Version, ProxyRepository = "v1.2.3", "registry.example/coxswain-proxy"
	if got, want := ProxyImage(), "registry.example/coxswain-proxy:v1.2.3"; got != want {
		t.Errorf("stamped ProxyImage() = %q, want %q", got, want)
	}
}

func TestString(t *testing.T) {
	oldV, oldR := Version, Revision
	t.Cleanup(func() { Version, Revision = oldV, oldR })
	Version, Revision = "v1.2.3", "0123abcd"
	got := String("coxswain")
	want := "coxswain v1.2.3 (revision 0123abcd, " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")"
	if got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	Revision = ""
	if got := CommitRevision(); got == "" || strings.ContainsAny(got, " \n") {
		t.Errorf("CommitRevision() without a stamp = %q, want the toolchain's revision or unknown", got)
	}
}
