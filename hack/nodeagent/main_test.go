package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"coxswain.dev/coxswain/hack/nodeagent/internal/sandbox"
	"coxswain.dev/coxswain/hack/nodeagent/internal/userns"
)

// The test runs inside private user, network and PID namespaces: outside, TestMain compiles
// the agent and the test workload and re-executes this test binary in new namespaces (as the
// cluster command does: userns.Attrs); inside, it
// brings the loopback up with the API server's address and checks that no route leads out.
// Every pod and bridge address then lives in a namespace that cannot reach the host's network,
// and the PID namespace takes every process of the test down with it.
const (
	envInNamespace = "COXSWAIN_NODEAGENT_TEST_NAMESPACE"
	envAgent       = "COXSWAIN_NODEAGENT_TEST_AGENT"
	envServer      = "COXSWAIN_NODEAGENT_TEST_SERVER"
	envAssets      = "COXSWAIN_NODEAGENT_TEST_ASSETS"
	envCoreDNS     = "COXSWAIN_NODEAGENT_TEST_COREDNS"
	// apiAddress is the API server's advertised address, on the namespace's loopback.
	apiAddress = "198.18.0.1"
)

func TestMain(m *testing.M) {
	if os.Getenv(envInNamespace) == "1" {
		// A /proc of its own: the agent finds pod namespaces through /proc/<pid>.
		err := userns.MountProc()
		if err == nil {
			err = setUpNamespace(context.Background())
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		code := m.Run()
		if err := stopCluster(); err != nil {
			fmt.Fprintf(os.Stderr, "nodeagent test: stop cluster: %v\n", err)
			code = 1
		}
		os.Exit(code)
	}
	os.Exit(enterNamespaces())
}

func enterNamespaces() int {
	ctx := context.Background()
	assets, err := assetsDir()
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodeagent test: %v\n", err)
		return 1
	}
	coredns, err := corednsBinary()
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodeagent test: %v\n", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "coxswain-nodeagent-test-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodeagent test: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir) //nolint:errcheck // a temporary directory
	agent, server := filepath.Join(dir, "nodeagent"), filepath.Join(dir, "testserver")
	// The workload runs chrooted with nothing but its binary: it must be static. The agent runs
	// outside the chroot and builds as the test does, sharing its build cache.
	// COXSWAIN_NODEAGENT_TEST_RACE=1 builds the agent with the race detector.
	race := ""
	if os.Getenv("COXSWAIN_NODEAGENT_TEST_RACE") == "1" {
		race = "-race"
	}
	for _, b := range [][4]string{{agent, ".", "", race}, {server, "./internal/testserver", "CGO_ENABLED=0", ""}} {
		cmd := exec.CommandContext(ctx, "go", slices.DeleteFunc([]string{"build", b[3], "-o", b[0], b[1]}, func(s string) bool { return s == "" })...)
		cmd.Env = append(os.Environ(), b[2])
		if b[2] == "" {
			cmd.Env = os.Environ()
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "nodeagent test: build %s: %v\n%s", b[1], err, out)
			return 1
		}
	}
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		fmt.Fprintf(os.Stderr, "nodeagent test: %v\n", err)
		return 1
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodeagent test: %v\n", err)
		return 1
	}
	cmd := exec.CommandContext(ctx, self, os.Args[1:]...)
	cmd.Env = append(withoutProxySettings(os.Environ()), envInNamespace+"=1", envAgent+"="+agent,
		envServer+"="+server, envAssets+"="+assets, envCoreDNS+"="+coredns, "TMPDIR="+tmp)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = userns.Attrs()
	err = cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodeagent test: re-execute in new namespaces (needs user namespaces): %v\n", err)
		return 1
	}
	return 0
}

// assetsDir is KUBEBUILDER_ASSETS, or bin/k8s of the repository (hack/k8s-assets.sh).
func assetsDir() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(wd, "..", "..", "bin", "k8s")
	if _, err := os.Stat(filepath.Join(dir, "kube-controller-manager")); err != nil {
		return "", fmt.Errorf("no control plane binaries in %s: run hack/k8s-assets.sh or set KUBEBUILDER_ASSETS", dir)
	}
	return filepath.Abs(dir)
}

// corednsBinary is COXSWAIN_COREDNS, or bin/coredns of the repository (hack/coredns-assets.sh).
func corednsBinary() (string, error) {
	path := os.Getenv("COXSWAIN_COREDNS")
	if path == "" {
		path = filepath.Join("..", "..", "bin", "coredns")
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("no CoreDNS at %s: run hack/coredns-assets.sh or set COXSWAIN_COREDNS", path)
	}
	return filepath.Abs(path)
}

func withoutProxySettings(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(name) {
		case "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY":
			continue
		}
		out = append(out, kv)
	}
	return out
}

// setUpNamespace refuses to run unless only a loopback exists, brings it up with apiAddress
// and checks that no route leads out.
func setUpNamespace(ctx context.Context) error {
	ifaces, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("list interfaces: %w", err)
	}
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagLoopback == 0 {
			return fmt.Errorf("interface %s exists: this is not a private network namespace, refusing to run", ifc.Name)
		}
	}
	for _, args := range [][]string{{"link", "set", "lo", "up"}, {"addr", "add", apiAddress + "/32", "dev", "lo"}} {
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
		}
	}
	return sandbox.CheckNoRouteOut(ctx)
}
