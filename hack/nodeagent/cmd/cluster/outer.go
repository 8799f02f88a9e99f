package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"coxswain.dev/coxswain/hack/nodeagent/internal/image"
)

// unshareArgs: a user namespace mapping us to root, a network namespace with nothing but a
// loopback, a PID namespace with a /proc of its own in a mount namespace of its own;
// --kill-child ends the tree with unshare.
var unshareArgs = []string{"--user", "--map-root-user", "--net", "--pid", "--fork", "--mount", "--mount-proc", "--kill-child"}

// outer prepares what the cluster needs from the host (nothing inside can reach the network),
// then runs the rest of itself inside fresh namespaces and cleans up after it.
func outer(o options) (int, error) {
	ctx := context.Background()
	if o.agent == "" || o.kustomize == "" {
		return 2, errors.New("--agent and --kustomize are required")
	}
	for _, p := range []*string{&o.state, &o.assets, &o.agent, &o.coredns, &o.kustomize, &o.config, &o.operatorBinary, &o.proxyBinary} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return 1, err
		}
		*p = abs
	}
	pidFile := filepath.Join(o.state, "cluster.pid")
	if pid, ok := runningCluster(pidFile); ok {
		return 1, fmt.Errorf("a cluster is already running (pid %d, %s): use `hack/cluster.sh exec`, or stop it first", pid, pidFile)
	}
	logs := filepath.Join(o.state, "logs")
	if err := errors.Join(os.RemoveAll(logs), os.MkdirAll(logs, 0o750)); err != nil {
		return 1, fmt.Errorf("state directory: %w", err)
	}
	tmp, err := os.MkdirTemp("", "coxswain-cluster-")
	if err != nil {
		return 1, err
	}
	defer os.RemoveAll(tmp) //nolint:errcheck // the run's temporary files; best effort

	defaults := image.Map{o.operatorImage: o.operatorBinary, o.proxyImage: o.proxyBinary}
	for _, kv := range o.extraImages {
		name, path, ok := strings.Cut(kv, "=")
		if !ok || name == "" || path == "" {
			return 2, fmt.Errorf("--image %q: want IMAGE=PATH", kv)
		}
		defaults[name] = path
	}
	mapText, imap, err := imageMap(defaults, o.images)
	if err != nil {
		return 1, err
	}
	imagesFile := filepath.Join(o.state, "images.txt")
	if err := os.WriteFile(imagesFile, mapText, 0o600); err != nil {
		return 1, err
	}
	manifest, err := render(ctx, o.kustomize, o.config, tmp, o.overlay, o.operatorImage, o.proxyImage)
	if err != nil {
		return 1, err
	}
	if err := checkImages(manifest, imap); err != nil {
		return 1, err
	}
	deploy := filepath.Join(tmp, "deploy.yaml")
	if err := os.WriteFile(deploy, manifest, 0o600); err != nil {
		return 1, err
	}
	progress("manifests rendered from %s (%s, %s), image map %s", o.config, o.operatorImage, o.proxyImage, imagesFile)
	return enter(o, tmp, deploy, imagesFile, pidFile)
}

// enter re-executes this binary under unshare and waits for it, recording the namespaces'
// first process for `hack/cluster.sh exec` while it runs.
func enter(o options, tmp, deploy, imagesFile, pidFile string) (int, error) {
	self, err := os.Executable()
	if err != nil {
		return 1, err
	}
	innerTmp := filepath.Join(tmp, "tmp")
	if err := os.Mkdir(innerTmp, 0o700); err != nil {
		return 1, err
	}
	args := slices.Concat(unshareArgs, []string{
		"--", self, "run",
		"--state=" + o.state, "--assets=" + o.assets, "--agent=" + o.agent, "--coredns=" + o.coredns, "--kustomize=" + o.kustomize,
		"--wait=" + o.wait, "--timeout=" + o.timeout.String(), "--",
	}, o.cmd)
	cmd := exec.Command("unshare", args...) //nolint:gosec,noctx // ourselves, under unshare; stopped by signals
	cmd.Env = append(withoutProxySettings(os.Environ()), envInner+"=1", "TMPDIR="+innerTmp,
		"COXSWAIN_CLUSTER_DEPLOY="+deploy, "COXSWAIN_CLUSTER_IMAGES="+imagesFile,
		fmt.Sprintf("%s=%.3f", envStart, float64(startTime().UnixNano())/1e9))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// Ctrl-C reaches the whole foreground process group, the tree inside included; a signal
	// sent to this process alone is passed on to the tree's first process.
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(signals)
	if err := cmd.Start(); err != nil {
		return 1, fmt.Errorf("run unshare (needs util-linux and user namespaces): %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	innerPID := 0
	defer func() {
		_ = os.Remove(pidFile)
		_ = os.Remove(filepath.Join(o.state, "admin.kubeconfig"))
	}()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				return exit.ExitCode(), nil
			}
			return 0, err
		case sig := <-signals:
			if innerPID != 0 {
				_ = syscall.Kill(innerPID, sig.(syscall.Signal))
			}
		case <-tick.C:
			if innerPID != 0 {
				continue
			}
			if innerPID = childOf(cmd.Process.Pid); innerPID != 0 {
				if err := os.WriteFile(pidFile, []byte(strconv.Itoa(innerPID)+"\n"), 0o600); err != nil {
					_ = syscall.Kill(innerPID, syscall.SIGTERM)
					return 1, fmt.Errorf("write pid file: %w", err)
				}
			}
		}
	}
}

// childOf returns the first child of process pid (unshare's forked child, PID 1 of the new PID
// namespace, as the host sees it), or 0.
func childOf(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(data))
	if len(fields) == 0 {
		return 0
	}
	child, _ := strconv.Atoi(fields[0])
	return child
}

// runningCluster reports the process a pid file names, if it is alive.
func runningCluster(pidFile string) (int, bool) {
	data, err := os.ReadFile(pidFile) //nolint:gosec // our state directory
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, syscall.Kill(pid, 0) == nil
}

// withoutProxySettings drops HTTP proxy variables: inside, every address is local and a proxy
// could not be reached anyway.
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
