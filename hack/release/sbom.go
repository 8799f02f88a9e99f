package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"
)

// The CycloneDX document the release writes for each program: the Go modules its binary was
// linked from, as recorded by the toolchain (what `go version -m` prints), the standard library
// of the toolchain included, so that a scanner can match them against advisories.
type cdxBOM struct {
	BOMFormat    string          `json:"bomFormat"`
	SpecVersion  string          `json:"specVersion"`
	SerialNumber string          `json:"serialNumber"`
	Version      int             `json:"version"`
	Metadata     cdxMetadata     `json:"metadata"`
	Components   []cdxComponent  `json:"components"`
	Dependencies []cdxDependency `json:"dependencies"`
}

type cdxMetadata struct {
	Timestamp string       `json:"timestamp"`
	Tools     cdxTools     `json:"tools"`
	Component cdxComponent `json:"component"`
}

type cdxTools struct {
	Components []cdxComponent `json:"components"`
}

type cdxComponent struct {
	Type       string        `json:"type"`
	BOMRef     string        `json:"bom-ref,omitempty"`
	Name       string        `json:"name"`
	Version    string        `json:"version,omitempty"`
	PURL       string        `json:"purl,omitempty"`
	Properties []cdxProperty `json:"properties,omitempty"`
}

type cdxProperty struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type cdxDependency struct {
	Ref       string   `json:"ref"`
	DependsOn []string `json:"dependsOn"`
}

// goPURL is the package URL of a Go module.
func goPURL(path, version string) string {
	return "pkg:golang/" + path + "@" + version
}

// moduleSBOM reads the module information the toolchain recorded in binary and describes it as
// CycloneDX 1.5. Modules replaced by a directory of the repository (discovery) are part of the
// release and carry its version.
func moduleSBOM(binary, name, version string, created time.Time) ([]byte, error) {
	info, err := buildinfo.ReadFile(binary)
	if err != nil {
		return nil, fmt.Errorf("read build information of %s: %w", binary, err)
	}
	mainRef := goPURL(info.Main.Path, version)
	main := cdxComponent{Type: "application", BOMRef: mainRef, Name: name, Version: version, PURL: mainRef}
	for _, s := range info.Settings {
		if strings.HasPrefix(s.Key, "-") || s.Key == "GOOS" || s.Key == "GOARCH" || s.Key == "CGO_ENABLED" {
			main.Properties = append(main.Properties, cdxProperty{Name: "go:build:" + s.Key, Value: s.Value})
		}
	}
	std := goPURL("stdlib", info.GoVersion)
	components := []cdxComponent{{Type: "library", BOMRef: std, Name: "stdlib", Version: info.GoVersion, PURL: std}}
	deps := []string{std}
	for _, m := range info.Deps {
		c := cdxComponent{Type: "library", Name: m.Path, Version: m.Version}
		switch {
		case m.Replace != nil && m.Replace.Version == "":
			c.Version = version
			c.Properties = []cdxProperty{{Name: "go:replace", Value: "directory of the repository (" + m.Replace.Path + ")"}}
		case m.Replace != nil:
			c.Version = m.Replace.Version
			c.Properties = []cdxProperty{{Name: "go:replace", Value: m.Replace.Path + "@" + m.Replace.Version}}
		case m.Sum != "":
			c.Properties = []cdxProperty{{Name: "go:sum", Value: m.Sum}}
		}
		c.PURL = goPURL(m.Path, c.Version)
		c.BOMRef = c.PURL
		components = append(components, c)
		deps = append(deps, c.BOMRef)
	}
	serial := sha256.Sum256([]byte(mainRef + "|" + info.String()))
	u := serial[:16]
	u[6], u[8] = u[6]&0x0f|0x50, u[8]&0x3f|0x80 // a name-based UUID: the same binary, the same serial
	bom := cdxBOM{
		BOMFormat:    "CycloneDX",
		SpecVersion:  "1.5",
		SerialNumber: fmt.Sprintf("urn:uuid:%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]),
		Version:      1,
		Metadata: cdxMetadata{
			Timestamp: created.Format(time.RFC3339),
			Tools:     cdxTools{Components: []cdxComponent{{Type: "application", Name: "coxswain-release", Version: version}}},
			Component: main,
		},
		Components:   components,
		Dependencies: []cdxDependency{{Ref: mainRef, DependsOn: deps}},
	}
	out, err := json.MarshalIndent(bom, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode SBOM: %w", err)
	}
	return append(out, '\n'), nil
}

// writeSBOM writes the SBOM of a binary to path.
func writeSBOM(path, binary, name, version string, created time.Time) error {
	out, err := moduleSBOM(binary, name, version, created)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return fmt.Errorf("write SBOM: %w", err)
	}
	return nil
}
