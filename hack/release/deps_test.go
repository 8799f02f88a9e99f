package main

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// modules are the repository's Go modules, relative to its root (the Makefile's MODULES).
var modules = []string{".", "discovery", "proxy", "hack/nodeagent", "test/conformance", "hack/release"}

// shared are the dependencies every module that requires them must require at one version: the
// x/ family, gRPC and protobuf, compression, the Prometheus client, the Kubernetes libraries,
// controller-runtime, OpenTelemetry and go-containerregistry.
var shared = regexp.MustCompile(`^\s*(?:require\s+)?(` +
	`golang\.org/x/(?:net|crypto|sys|text|sync|term)|` +
	`google\.golang\.org/(?:grpc|protobuf)|` +
	`github\.com/klauspost/compress|` +
	`github\.com/prometheus/(?:client_golang|client_model|common)|` +
	`k8s\.io/(?:api|apimachinery|client-go|apiextensions-apiserver)|` +
	`sigs\.k8s\.io/controller-runtime|` +
	`go\.opentelemetry\.io/otel(?:/[a-z/]+)?|` +
	`github\.com/google/go-containerregistry` +
	`)\s+(v\S+)`)

// TestSharedDependenciesAtOneVersion reads the require lines of every module's go.mod: a shared
// dependency is required at the same version wherever it is required, so the binaries and tools
// of one commit link one copy of it (a fix taken in one module is taken in all).
func TestSharedDependenciesAtOneVersion(t *testing.T) {
	versions := map[string]map[string]string{} // path -> version -> first module requiring it
	for _, m := range modules {
		f, err := os.Open(filepath.Join("..", "..", m, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if g := shared.FindStringSubmatch(sc.Text()); g != nil {
				if versions[g[1]] == nil {
					versions[g[1]] = map[string]string{}
				}
				if _, ok := versions[g[1]][g[2]]; !ok {
					versions[g[1]][g[2]] = m
				}
			}
		}
		_ = f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if len(versions) == 0 {
		t.Fatal("no module requires any shared dependency: the go.mod files were not read")
	}
	for path, vs := range versions {
		if len(vs) > 1 {
			t.Errorf("%s is required at %d versions: %v (version: first module); align them with go get in each module", path, len(vs), vs)
		}
	}
}
