package main

import (
	"strings"
	"testing"
)

func TestBuildFlagsRefuse(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--version", "1.2.3", "--revision", "abc"}, "is not vMAJOR.MINOR.PATCH"},
		{[]string{"--version", "v1.2", "--revision", "abc"}, "is not vMAJOR.MINOR.PATCH"},
		{[]string{"--version", "v01.2.3", "--revision", "abc"}, "is not vMAJOR.MINOR.PATCH"},
		{[]string{"--version", "v1.2.3"}, "--revision"},
		{[]string{"--version", "v1.2.3", "--revision", "abc", "--registry", "https://registry.example"}, "no scheme"},
		{[]string{"--version", "v1.2.3", "--revision", "abc", "--registry", "registry.example/"}, "no trailing slash"},
		{[]string{"--version", "v1.2.3", "--revision", "abc", "--source-date-epoch", "yesterday"}, "--source-date-epoch"},
	} {
		_, err := parseBuildFlags(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one saying %q", tc.args, err, tc.want)
		}
	}
	c, err := parseBuildFlags([]string{"--version", "v1.2.3-rc.1", "--revision", "abc", "--source-date-epoch", "1700000000"})
	if err != nil || c.SourceDate.Unix() != 1700000000 || chartVersion(c.Version) != "1.2.3-rc.1" {
		t.Errorf("valid flags: %+v, %v", c, err)
	}
}

func TestLdflagsStampBuildinfo(t *testing.T) {
	got := ldflags(buildConfig{Version: "v1.2.3", Revision: "abc", Registry: "registry.example/team"})
	for _, want := range []string{
		"-X coxswain.dev/coxswain/discovery/buildinfo.Version=v1.2.3",
		"-X coxswain.dev/coxswain/discovery/buildinfo.Revision=abc",
		"-X coxswain.dev/coxswain/discovery/buildinfo.ProxyRepository=registry.example/team/coxswain-proxy",
		"-buildid=",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("ldflags %q lack %q", got, want)
		}
	}
}

func TestCheckPinnedRefusesUnpinnedImages(t *testing.T) {
	refs := map[string]string{"coxswain": "r/coxswain:v1@sha256:aa", "coxswain-proxy": "r/coxswain-proxy:v1@sha256:bb"}
	good := "image: r/coxswain:v1@sha256:aa\nvalue: r/coxswain-proxy:v1@sha256:bb\n"
	if err := checkPinned([]byte(good), refs); err != nil {
		t.Errorf("pinned manifest refused: %v", err)
	}
	for _, bad := range []string{
		good + "image: coxswain.dev/coxswain-proxy:dev\n",
		good + "expression: \"['coxswain.dev/coxswain:dev']\"\n",
		good + "image: proxy\n",
		"image: r/coxswain:v1@sha256:aa\n",
	} {
		if err := checkPinned([]byte(bad), refs); err == nil {
			t.Errorf("manifest %q accepted", bad)
		}
	}
}

func TestPinChartValues(t *testing.T) {
	values := "image:\n  repository: coxswain.dev/coxswain # release: coxswain\n  digest: \"\" # release: coxswain\n" +
		"proxy:\n  image:\n    repository: coxswain.dev/coxswain-proxy # release: coxswain-proxy\n    digest: \"\" # release: coxswain-proxy\n"
	digests := map[string]string{"coxswain": "sha256:aa", "coxswain-proxy": "sha256:bb"}
	got, err := pinChartValues([]byte(values), "registry.example", digests)
	if err != nil {
		t.Fatal(err)
	}
	want := "image:\n  repository: \"registry.example/coxswain\" # release: coxswain\n  digest: \"sha256:aa\" # release: coxswain\n" +
		"proxy:\n  image:\n    repository: \"registry.example/coxswain-proxy\" # release: coxswain-proxy\n    digest: \"sha256:bb\" # release: coxswain-proxy\n"
	if string(got) != want {
		t.Errorf("pinned values:\n%s\nwant:\n%s", got, want)
	}
	for _, bad := range []string{
		strings.Replace(values, "  digest: \"\" # release: coxswain\n", "", 1),
		values + "  digest: \"\" # release: coxswain\n",
		values + "  digest: \"\" # release: other\n",
	} {
		if _, err := pinChartValues([]byte(bad), "registry.example", digests); err == nil {
			t.Errorf("values %q accepted", bad)
		}
	}
}

func TestParseImagesFlags(t *testing.T) {
	c, err := parseImagesFlags([]string{"--revision", "abc", "--platforms", "linux/arm64,linux/amd64"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Version != DevVersion || len(c.Platforms) != 2 || c.Platforms[0] != Platforms[0] {
		t.Errorf("got version %s platforms %v, want %s and the release's order", c.Version, c.Platforms, DevVersion)
	}
	for _, bad := range []string{"linux/s390x", "linux", "", "linux/amd64,"} {
		if _, err := parseImagesFlags([]string{"--revision", "abc", "--platforms", bad}); err == nil {
			t.Errorf("--platforms %q accepted", bad)
		}
	}
	if _, err := parseImagesFlags([]string{"--revision", "abc", "--version", "dev"}); err == nil {
		t.Error("--version dev accepted: images carry a release version's form")
	}
}
