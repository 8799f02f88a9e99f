// Command localcluster is `make run`. When a cluster is configured (KUBECONFIG, ~/.kube/config,
// or in-cluster) it runs its command (the operator) against it. Otherwise it starts the local
// cluster (hack/cluster.sh run: control plane and node agent in private namespaces, Coxswain
// deployed from config/default), applies the samples of config/samples/local (an echo backend,
// a shared and a dedicated Gateway with an HTTPRoute each), waits until both Gateways are
// Programmed with an address and answer, prints the command that sends a request through each,
// and keeps the cluster up until Ctrl-C.
//
//	go run ./hack/localcluster -- go run .
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

// inClusterVerb runs the samples step; hack/cluster.sh runs it inside the cluster's namespaces.
const inClusterVerb = "--in-cluster"

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == inClusterVerb {
		if err := samples(args[1:]); err != nil {
			fmt.Fprintf(os.Stderr, "localcluster: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: localcluster -- COMMAND [ARG...]")
		os.Exit(2)
	}
	code, err := run(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "localcluster: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func clusterConfigured() bool {
	if os.Getenv("KUBECONFIG") != "" || os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		return true
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return false
	}
	_, err = os.Stat(filepath.Join(home, ".kube", "config"))
	return err == nil
}

func run(args []string) (int, error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if clusterConfigured() {
		fmt.Fprintln(os.Stderr, "localcluster: using the configured cluster")
		return runCommand(ctx, args, os.Environ())
	}
	root, err := projectRoot()
	if err != nil {
		return 1, err
	}
	self, err := os.Executable()
	if err != nil {
		return 1, err
	}
	fmt.Fprintf(os.Stderr, "localcluster: no cluster configured: starting the local cluster (hack/cluster.sh run) with Coxswain deployed; the operator runs there as a pod (the command given, %q, is not run)\n", strings.Join(args, " "))
	script := filepath.Join(root, "hack", "cluster.sh")
	return runCommand(ctx, []string{script, "run", "--", self, inClusterVerb, filepath.Join(root, "config", "samples", "local")}, os.Environ())
}

// projectRoot is the directory holding go.mod, from the working directory up.
func projectRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "hack", "cluster.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no hack/cluster.sh in the working directory or above: run from the repository")
		}
		dir = parent
	}
}

func runCommand(ctx context.Context, args, env []string) (int, error) {
	// Not CommandContext: on cancellation the whole process group gets SIGTERM, not SIGKILL.
	cmd := exec.Command(args[0], args[1:]...) //nolint:gosec,noctx // runs the command its user asked for
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = env, os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return 1, fmt.Errorf("start %s: %w", args[0], err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return exitCode(err)
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		return exitCode(<-done)
	}
}

func exitCode(err error) (int, error) {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), nil
	}
	return 0, err
}
