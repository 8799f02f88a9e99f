package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"k8s.io/client-go/kubernetes"

	"coxswain.dev/coxswain/hack/nodeagent/internal/controlplane"
	"coxswain.dev/coxswain/hack/nodeagent/internal/sandbox"
	"coxswain.dev/coxswain/hack/nodeagent/internal/userns"
)

// cluster is what runs inside the namespaces.
type cluster struct {
	o          options
	logs       string
	kubeconfig string
	cp         *controlplane.ControlPlane
	client     kubernetes.Interface
	agent      *exec.Cmd
	registries map[string]string // registry name -> the cluster registry's address
	registry   func() error      // stops the cluster's registry; nil when none runs
	upgradeEnv []string          // what the command learns of the release to upgrade to
	agentDone  chan struct{}     // closed when the agent has exited, with agentErr
	agentErr   error
}

// inner runs inside the namespaces outer made: it starts the cluster, deploys Coxswain, and
// runs the command or waits for a signal; then it stops everything.
func inner(o options) (int, error) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	if err := userns.MountProc(); err != nil {
		return 1, err
	}
	if err := checkNamespace(ctx); err != nil {
		return 1, err
	}
	c := &cluster{o: o, logs: filepath.Join(o.state, "logs"), kubeconfig: filepath.Join(o.state, "admin.kubeconfig")}
	err := c.start(ctx)
	code := 0
	switch {
	case err == nil:
		code, err = c.serve(ctx)
	case ctx.Err() != nil:
		progress("interrupted while starting")
		code, err = 130, nil
	}
	progress("stopping")
	if stopErr := c.stop(); stopErr != nil {
		err = errors.Join(err, stopErr)
	}
	if err == nil {
		progress("stopped")
	}
	return code, err
}

// checkNamespace refuses to run unless the network namespace holds only a loopback and no
// route leads out; it brings the loopback up.
func checkNamespace(ctx context.Context) error {
	ifaces, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("list interfaces: %w", err)
	}
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagLoopback == 0 {
			return fmt.Errorf("interface %s exists: this is not a fresh network namespace, refusing to run", ifc.Name)
		}
	}
	if out, err := exec.CommandContext(ctx, "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("ip link set lo up: %w: %s", err, bytes.TrimSpace(out))
	}
	return sandbox.CheckNoRouteOut(ctx)
}

func (c *cluster) start(ctx context.Context) error {
	dir := filepath.Join(os.TempDir(), "control-plane")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	cp, err := controlplane.Start(ctx, controlplane.Options{
		Assets: c.o.assets, Dir: dir, AdvertiseAddress: nodeAddress, BindAddress: "0.0.0.0",
		SecurePort: apiPort, LogDir: c.logs,
	})
	if err != nil {
		return fmt.Errorf("start control plane: %w (logs in %s)", err, c.logs)
	}
	c.cp = cp
	if c.client, err = kubernetes.NewForConfig(cp.Config); err != nil {
		return err
	}
	data, err := os.ReadFile(cp.Kubeconfig)
	if err != nil {
		return err
	}
	if err := os.WriteFile(c.kubeconfig, data, 0o600); err != nil {
		return fmt.Errorf("write admin kubeconfig: %w", err)
	}
	progress("control plane ready: etcd, kube-apiserver (https://127.0.0.1:%d, advertised %s:%d), kube-controller-manager", apiPort, nodeAddress, apiPort)
	if c.o.release != "" {
		if err := c.startRegistry(ctx); err != nil {
			return err
		}
	}
	if err := c.startAgent(); err != nil {
		return err
	}
	if err := c.waitNode(ctx); err != nil {
		return err
	}
	if err := sandbox.CheckNoRouteOut(ctx); err != nil {
		return err
	}
	useClusterDNS()
	progress("node %s Ready on bridge %s; no route out", nodeName, nodeAddress)
	if c.o.chart != "" {
		if err := c.helmInstall(ctx); err != nil {
			return err
		}
		progress("installed the chart %s with helm (CRDs, RBAC, operator, shared proxy pool)", c.o.chart)
		return c.waitCoxswain(ctx)
	}
	if err := c.apply(ctx, os.Getenv("COXSWAIN_CLUSTER_DEPLOY")); err != nil {
		return err
	}
	tree := "config/default"
	if c.o.overlay != "" {
		tree = "config/overlays/" + c.o.overlay
	}
	progress("applied %s (CRDs, RBAC, operator, shared proxy pool)", tree)
	return c.waitCoxswain(ctx)
}

// startRegistry serves the images of the release, and of the release to upgrade to when there
// is one, from a registry on the cluster namespace's loopback.
func (c *cluster) startRegistry(ctx context.Context) error {
	releases := map[string]map[string]releaseImage{}
	for _, dir := range []string{c.o.release, c.o.nextRelease} {
		if dir == "" {
			continue
		}
		images, err := readRelease(dir)
		if err != nil {
			return err
		}
		releases[dir] = images
	}
	log, err := os.Create(filepath.Join(c.logs, "registry.log"))
	if err != nil {
		return err
	}
	began := time.Now()
	c.registries, c.registry, err = serveRegistry(ctx, releases, log)
	if err != nil {
		return errors.Join(err, log.Close())
	}
	stop := c.registry
	c.registry = func() error { return errors.Join(stop(), log.Close()) }
	for _, dir := range []string{c.o.release, c.o.nextRelease} {
		if images, ok := releases[dir]; ok {
			progress("registry %s serves %s (pushed in %s)", registryAddress, describeRelease(images), time.Since(began).Round(time.Millisecond))
		}
	}
	if c.o.nextRelease != "" {
		from, to := releases[c.o.release], releases[c.o.nextRelease]
		if c.o.nextChart != "" {
			c.upgradeEnv = append(c.upgradeEnv, "COXSWAIN_UPGRADE_CHART="+c.o.nextChart, "COXSWAIN_UPGRADE_HELM="+c.o.helm,
				"COXSWAIN_UPGRADE_HELM_VALUES="+strings.Join(helmImageValues(to), " "))
		}
		c.upgradeEnv = append(c.upgradeEnv,
			"COXSWAIN_UPGRADE_MANIFEST="+os.Getenv("COXSWAIN_CLUSTER_NEXT_MANIFEST"),
			"COXSWAIN_UPGRADE_FROM_OPERATOR_IMAGE="+from[operatorComponent].pinned(),
			"COXSWAIN_UPGRADE_FROM_PROXY_IMAGE="+from[proxyComponent].pinned(),
			"COXSWAIN_UPGRADE_OPERATOR_IMAGE="+to[operatorComponent].pinned(),
			"COXSWAIN_UPGRADE_PROXY_IMAGE="+to[proxyComponent].pinned(),
		)
	}
	return nil
}

func (c *cluster) startAgent() error {
	log, err := os.Create(filepath.Join(c.logs, "nodeagent.log"))
	if err != nil {
		return err
	}
	args := []string{
		"--kubeconfig=" + c.kubeconfig, "--node-name=" + nodeName,
		"--images=" + os.Getenv("COXSWAIN_CLUSTER_IMAGES"),
		"--state-dir=" + filepath.Join(os.TempDir(), "node"),
		"--kubelet-client-ca=" + c.cp.CAFile, "--dns-server=" + c.o.coredns,
	}
	for name, addr := range c.registries {
		args = append(args, "--registry="+name+"="+addr)
	}
	c.agent = exec.Command(c.o.agent, args...) //nolint:gosec,noctx // our agent; stopped by SIGTERM in stop
	c.agent.Stdout, c.agent.Stderr = log, log
	// Its own process group: Ctrl-C reaches the command, and the agent stops in order.
	c.agent.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := c.agent.Start(); err != nil {
		_ = log.Close()
		return fmt.Errorf("start node agent: %w", err)
	}
	c.agentDone = make(chan struct{})
	go func() {
		c.agentErr = c.agent.Wait()
		_ = log.Close()
		close(c.agentDone)
	}()
	return nil
}

// apply applies the rendered manifests as make deploy does (server-side apply), retrying while
// the API server settles.
func (c *cluster) apply(ctx context.Context, manifest string) error {
	return c.retrying(ctx, "apply.log", "kubectl apply", func() *exec.Cmd {
		return exec.CommandContext(ctx, filepath.Join(c.o.assets, "kubectl"), "--kubeconfig="+c.kubeconfig, //nolint:gosec // the cluster's kubectl
			"apply", "--server-side", "-f", manifest)
	}, nil)
}

// helmRelease is the Helm release the cluster installs with --chart.
const helmRelease = "coxswain"

// helmInstall installs the chart as docs/installation.md does, its images set to the release's
// pinned references, retrying while the API server settles.
func (c *cluster) helmInstall(ctx context.Context) error {
	images, err := readRelease(c.o.release)
	if err != nil {
		return err
	}
	args := []string{"install", helmRelease, c.o.chart, "--namespace", installNamespace, "--create-namespace", "--kubeconfig", c.kubeconfig}
	args = append(args, helmImageValues(images)...)
	return c.retrying(ctx, "helm.log", "helm install", func() *exec.Cmd {
		cmd := exec.CommandContext(ctx, c.o.helm, args...) //nolint:gosec // our helm
		cmd.Env = append(os.Environ(), helmEnv(os.TempDir())...)
		return cmd
	}, func() {
		// A failed install leaves a release behind: remove it before the next try.
		_ = exec.CommandContext(ctx, c.o.helm, "uninstall", helmRelease, "--namespace", installNamespace, "--kubeconfig", c.kubeconfig).Run() //nolint:gosec // our helm
	})
}

// retrying runs the command newCmd makes until it succeeds, for up to a minute while the API
// server settles, appending its output to the log logName; undo, when given, runs between
// tries.
func (c *cluster) retrying(ctx context.Context, logName, what string, newCmd func() *exec.Cmd, undo func()) error {
	log, err := os.Create(filepath.Join(c.logs, logName))
	if err != nil {
		return err
	}
	defer log.Close() //nolint:errcheck // a log
	deadline := time.Now().Add(time.Minute)
	for {
		cmd := newCmd()
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		_, _ = log.Write(out.Bytes())
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: %w: %s", what, err, lastLines(out.String(), 5))
		}
		if undo != nil {
			undo()
		}
		time.Sleep(time.Second)
	}
}

// helmImageValues sets the chart's operator and proxy images to the release's references.
func helmImageValues(images map[string]releaseImage) []string {
	var out []string
	for prefix, comp := range map[string]string{"image": operatorComponent, "proxy.image": proxyComponent} {
		img := images[comp]
		ref, _ := name.NewTag(img.Ref) // checked by readRelease
		out = append(out,
			"--set", prefix+".repository="+ref.Context().Name(),
			"--set", prefix+".tag="+ref.TagStr(),
			"--set", prefix+".digest="+img.Digest)
	}
	return out
}

// helmEnv keeps helm's cache, configuration and data under dir.
func helmEnv(dir string) []string {
	return []string{
		"HELM_CACHE_HOME=" + filepath.Join(dir, "helm", "cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(dir, "helm", "config"),
		"HELM_DATA_HOME=" + filepath.Join(dir, "helm", "data"),
	}
}

// serve runs the command with the cluster's kubeconfig, or waits for a signal without one.
func (c *cluster) serve(ctx context.Context) (int, error) {
	if len(c.o.cmd) == 0 {
		progress("cluster up; Ctrl-C stops it. From another terminal:\n"+
			"  hack/cluster.sh exec -- kubectl get pods -A\n"+
			"  hack/cluster.sh exec -- bash    # a shell inside, KUBECONFIG set\n"+
			"  logs: %s", c.logs)
		select {
		case <-ctx.Done():
		case <-c.agentDone:
			return 1, fmt.Errorf("node agent exited: %w (log %s)", c.agentErr, filepath.Join(c.logs, "nodeagent.log"))
		}
		return 0, nil
	}
	cmd := exec.Command(c.o.cmd[0], c.o.cmd[1:]...) //nolint:gosec,noctx // the user's command; ends on its own or by the terminal's signal
	cmd.Env = append(append(commandEnv(os.Environ(), c.o.assets), "KUBECONFIG="+c.kubeconfig), c.upgradeEnv...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	progress("running %s", strings.Join(c.o.cmd, " "))
	if err := cmd.Start(); err != nil {
		return 127, fmt.Errorf("start %s: %w", c.o.cmd[0], err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		// The terminal's Ctrl-C reached the command too; a signal sent to us alone is passed on.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err = <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			err = <-done
		}
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), nil
	}
	return 0, err
}

// commandEnv is the environment of commands run inside: kubectl and the other control-plane
// binaries on PATH, without our own variables but the start time (progress lines may use it).
func commandEnv(env []string, assets string) []string {
	out := env[:0:0]
	path := assets
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "COXSWAIN_CLUSTER_") && name != envStart:
			continue
		case name == "PATH":
			path = assets + string(os.PathListSeparator) + value
			continue
		}
		out = append(out, kv)
	}
	return append(out, "PATH="+path)
}

// stop stops the agent (which stops its pods) and then the control plane.
func (c *cluster) stop() error {
	var errs []error
	if c.agent != nil {
		_ = syscall.Kill(-c.agent.Process.Pid, syscall.SIGTERM)
		select {
		case <-c.agentDone:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-c.agent.Process.Pid, syscall.SIGKILL)
			<-c.agentDone
			errs = append(errs, errors.New("node agent did not stop within 30s of SIGTERM"))
		}
	}
	if c.registry != nil {
		errs = append(errs, c.registry())
	}
	if c.cp != nil {
		errs = append(errs, c.cp.Stop())
	}
	return errors.Join(errs...)
}

// useClusterDNS points the resolver of this mount namespace (the cluster's, private) at the
// cluster DNS server, so commands run inside resolve Service names. Nothing answers there
// until the node serves DNS; a lookup then fails instead of leaving the namespace.
func useClusterDNS() {
	path := filepath.Join(os.TempDir(), "resolv.conf")
	conf := "nameserver " + nodeAddress + "\nsearch svc.cluster.local cluster.local\noptions ndots:5\n"
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil { //nolint:gosec // resolv.conf is world-readable
		progress("warning: cluster DNS for commands inside: %v", err)
		return
	}
	if err := syscall.Mount(path, "/etc/resolv.conf", "", syscall.MS_BIND, ""); err != nil {
		progress("warning: bind-mount /etc/resolv.conf: %v", err)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
