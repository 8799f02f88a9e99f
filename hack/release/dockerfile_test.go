package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// dockerfiles name the Dockerfile of each component, relative to the repository root.
var dockerfiles = map[string]string{"coxswain": "Dockerfile", "coxswain-proxy": "Dockerfile.proxy"}

// labelPair is one key="value" of a LABEL instruction.
var labelPair = regexp.MustCompile(`([a-z.]+)="([^"]*)"`)

// TestDockerfilesBuildTheSameImage reads the final stage of each Dockerfile: it must run as the
// image make release builds does (user, entrypoint, working directory), label it with the same
// keys and values (the version and revision as build arguments), and stamp the same variables.
func TestDockerfilesBuildTheSameImage(t *testing.T) {
	for _, comp := range Components {
		raw, err := os.ReadFile(filepath.Join("..", "..", dockerfiles[comp.Name]))
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ReplaceAll(string(raw), "\\\n", " ")
		stages := strings.Split(text, "\nFROM ")
		final := stages[len(stages)-1]
		instr := map[string]string{}
		for _, line := range strings.Split(final, "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok && !strings.HasPrefix(k, "#") {
				instr[k] = strings.TrimSpace(v)
			}
		}
		m := imageMeta{Component: comp, Version: "${VERSION}", Revision: "${REVISION}"}
		want := m.labels()
		delete(want, "org.opencontainers.image.created") // Docker records its own creation time
		got := map[string]string{}
		for _, p := range labelPair.FindAllStringSubmatch(instr["LABEL"], -1) {
			got[p[1]] = p[2]
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s labels (-release +Dockerfile):\n%s", dockerfiles[comp.Name], diff)
		}
		entrypoint, _ := json.Marshal([]string{"/" + comp.Name})
		for k, v := range map[string]string{"USER": "65532:65532", "ENTRYPOINT": string(entrypoint), "WORKDIR": homeDir} {
			if strings.ReplaceAll(instr[k], ", ", ",") != v {
				t.Errorf("%s %s %q, want %q as the release image", dockerfiles[comp.Name], k, instr[k], v)
			}
		}
		for _, stamp := range []string{buildinfoPkg + ".Version=${VERSION}", buildinfoPkg + ".Revision=${REVISION}", "CGO_ENABLED=0", "-trimpath"} {
			if !strings.Contains(text, stamp) {
				t.Errorf("%s does not build with %s", dockerfiles[comp.Name], stamp)
			}
		}
	}
}
