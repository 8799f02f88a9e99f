package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestModuleSBOM describes this test binary, whose build information the toolchain records like
// any other's: every module it links is a component with its package URL, stdlib included.
func TestModuleSBOM(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := moduleSBOM(self, "release.test", "v1.2.3", testDate)
	if err != nil {
		t.Fatal(err)
	}
	var bom cdxBOM
	if err := json.Unmarshal(raw, &bom); err != nil {
		t.Fatal(err)
	}
	if bom.BOMFormat != "CycloneDX" || bom.SpecVersion != "1.5" || !strings.HasPrefix(bom.SerialNumber, "urn:uuid:") || len(bom.SerialNumber) != 45 {
		t.Errorf("header %q %q %q", bom.BOMFormat, bom.SpecVersion, bom.SerialNumber)
	}
	purls := map[string]string{}
	for _, c := range bom.Components {
		purls[c.Name] = c.PURL
	}
	if !strings.HasPrefix(purls["stdlib"], "pkg:golang/stdlib@go1.") {
		t.Errorf("stdlib component %q", purls["stdlib"])
	}
	if got := purls["github.com/google/go-containerregistry"]; got != "pkg:golang/github.com/google/go-containerregistry@v0.22.1" {
		t.Errorf("go-containerregistry component %q, want its pinned version", got)
	}
	if len(bom.Dependencies) != 1 || len(bom.Dependencies[0].DependsOn) != len(bom.Components) {
		t.Errorf("dependencies %+v, want the program depending on all %d components", bom.Dependencies, len(bom.Components))
	}
	again, err := moduleSBOM(self, "release.test", "v1.2.3", testDate)
	if err != nil || string(again) != string(raw) {
		t.Error("the SBOM of the same binary differs between two runs")
	}
}
