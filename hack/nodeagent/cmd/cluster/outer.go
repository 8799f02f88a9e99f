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

	"coxswain.dev/coxswain/hack/nodeagent/internal/image"
	"coxswain.dev/coxswain/hack/nodeagent/internal/userns"
)

// outer prepares what the cluster needs from the host (nothing inside can reach the network),
// then runs the rest of itself inside fresh namespaces and cleans up after it.
func outer(o options) (int, error) {
	ctx := context.Background()
	if o.agent == "" || o.kustomize == "" {
		return 2, errors.New("--agent and --kustomize are required")
	}
	for _, p := range []*string{&o.state, &o.assets, &o.agent, &o.coredns, &o.kustomize, &o.config, &o.operatorBinary, &o.proxyBinary, &o.release, &o.nextRelease, &o.nextConfig, &o.helm, &o.chart, &o.nextChart} {
		if *p == "" {
			continue
		}
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
	var served []string
	if o.release != "" {
		images, err := readRelease(o.release)
		if err != nil {
			return 1, err
		}
		o.operatorImage, o.proxyImage = images[operatorComponent].pinned(), images[proxyComponent].pinned()
		served = []string{o.operatorImage, o.proxyImage}
		defaults = image.Map{}
	}
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
	if err := checkImages(manifest, imap, served); err != nil {
		return 1, err
	}
	deploy := filepath.Join(tmp, "deploy.yaml")
	if err := os.WriteFile(deploy, manifest, 0o600); err != nil {
		return 1, err
	}
	if o.nextRelease != "" {
		if err := renderNext(ctx, o, tmp, imap); err != nil {
			return 1, err
		}
	}
	how := "image map " + imagesFile
	if o.release != "" {
		how = "pulled from the cluster's registry (release images of " + o.release + ")"
	}
	progress("manifests rendered from %s (%s, %s), %s", o.config, o.operatorImage, o.proxyImage, how)
	return enter(o, tmp, deploy, imagesFile, pidFile)
}

// nextManifest is where renderNext writes the manifests of the release to upgrade to, under the
// run's temporary directory, which the inner process shares.
func nextManifest(tmp string) string { return filepath.Join(tmp, "next.yaml") }

// renderNext renders the manifests of the release to upgrade to from --next-config, pinned to
// the images of --next-release, as the deployed release's are rendered.
func renderNext(ctx context.Context, o options, tmp string, imap image.Map) error {
	images, err := readRelease(o.nextRelease)
	if err != nil {
		return err
	}
	dir := filepath.Join(tmp, "next")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	op, proxy := images[operatorComponent].pinned(), images[proxyComponent].pinned()
	manifest, err := render(ctx, o.kustomize, o.nextConfig, dir, o.overlay, op, proxy)
	if err != nil {
		return fmt.Errorf("render the release to upgrade to: %w", err)
	}
	if err := checkImages(manifest, imap, []string{op, proxy}); err != nil {
		return fmt.Errorf("the release to upgrade to: %w", err)
	}
	if err := os.WriteFile(nextManifest(tmp), manifest, 0o600); err != nil {
		return err
	}
	progress("manifests to upgrade to rendered from %s (%s, %s)", o.nextConfig, op, proxy)
	return nil
}

// enter re-executes this binary in new namespaces and waits for it, recording its pid (the
// namespaces' first process) for `hack/cluster.sh exec` while it runs.
func enter(o options, tmp, deploy, imagesFile, pidFile string) (int, error) {
	self, err := os.Executable()
	if err != nil {
		return 1, err
	}
	innerTmp := filepath.Join(tmp, "tmp")
	if err := os.Mkdir(innerTmp, 0o700); err != nil {
		return 1, err
	}
	args := slices.Concat([]string{
		"run",
		"--state=" + o.state, "--assets=" + o.assets, "--agent=" + o.agent, "--coredns=" + o.coredns, "--kustomize=" + o.kustomize,
		"--overlay=" + o.overlay, "--release=" + o.release, "--next-release=" + o.nextRelease, "--next-config=" + o.nextConfig,
		"--helm=" + o.helm, "--chart=" + o.chart, "--next-chart=" + o.nextChart, "--wait=" + o.wait, "--timeout=" + o.timeout.String(), "--",
	}, o.cmd)
	cmd := exec.Command(self, args...) //nolint:gosec,noctx // ourselves, in new namespaces; stopped by signals
	cmd.Env = append(withoutProxySettings(os.Environ()), envInner+"=1", "TMPDIR="+innerTmp,
		"COXSWAIN_CLUSTER_DEPLOY="+deploy, "COXSWAIN_CLUSTER_IMAGES="+imagesFile, "COXSWAIN_CLUSTER_NEXT_MANIFEST="+nextManifest(tmp),
		fmt.Sprintf("%s=%.3f", envStart, float64(startTime().UnixNano())/1e9))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = userns.Attrs()
	// Ctrl-C reaches the whole foreground process group, the tree inside included; a signal
	// sent to this process alone is passed on to the tree's first process.
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(signals)
	if err := cmd.Start(); err != nil {
		return 1, fmt.Errorf("start the cluster in new namespaces (needs user namespaces): %w", err)
	}
	innerPID := cmd.Process.Pid
	defer func() {
		_ = os.Remove(pidFile)
		_ = os.Remove(filepath.Join(o.state, "admin.kubeconfig"))
	}()
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(innerPID)+"\n"), 0o600); err != nil {
		_ = syscall.Kill(innerPID, syscall.SIGKILL)
		_ = cmd.Wait()
		return 1, fmt.Errorf("write pid file: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case err := <-done:
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				return exit.ExitCode(), nil
			}
			return 0, err
		case sig := <-signals:
			_ = syscall.Kill(innerPID, sig.(syscall.Signal))
		}
	}
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
