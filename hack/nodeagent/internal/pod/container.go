package pod

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"

	"coxswain.dev/coxswain/hack/nodeagent/internal/containerlog"
	"coxswain.dev/coxswain/hack/nodeagent/internal/image"
	"coxswain.dev/coxswain/hack/nodeagent/internal/sandbox"
	"coxswain.dev/coxswain/hack/nodeagent/internal/userns"
)

// stableRun is how long a container must run for its restart backoff to start over.
const stableRun = 10 * time.Minute

// container supervises one container of a pod: it starts the process, watches it with its
// probes and restarts it by the pod's restart policy.
type container struct {
	w    *worker
	spec *corev1.Container
	init bool
	log  logr.Logger

	mu       sync.Mutex
	state    corev1.ContainerState
	last     corev1.ContainerState
	restarts int32
	logging  int32 // the run whose log is open, -1 when none
	ready    bool
	started  bool // the startup probe passed, or there is none
	id       string
	imageID  string        // the image's digest, or the binary the image map names
	root     string        // the root filesystem of the last run
	imageEnv []string      // the image's environment of the last run, for exec probes
	workDir  string        // the working directory of the last run
	runAs    *sandbox.User // who the last run ran as; nil: the namespace's root
	pid      int           // 0 when not running
	exitCh   chan struct{} // closed when the running process has exited
	stopping bool
	stopCh   chan struct{} // closed by stop
	done     chan struct{} // closed when supervise returns
}

func newContainer(w *worker, spec *corev1.Container, init bool) *container {
	return &container{
		w: w, spec: spec, init: init,
		log:     w.log.WithValues("container", spec.Name),
		logging: -1,
		state:   corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}},
		stopCh:  make(chan struct{}),
		done:    make(chan struct{}),
	}
}

// errCreate marks a container that could not even be created (unknown image, missing
// Secret key): it is retried with backoff whatever the restart policy.
var errCreate = errors.New("create container")

// supervise runs the container until the restart policy says it is done or stop is called.
func (c *container) supervise(ctx context.Context, policy corev1.RestartPolicy) {
	defer close(c.done)
	backoff := c.w.c.cfg.RestartBackoff
	for {
		began := time.Now()
		code, err := c.runOnce(ctx)
		if c.stopped() || ctx.Err() != nil {
			return
		}
		if err == nil && !restarts(policy, code) {
			return
		}
		if time.Since(began) > stableRun {
			backoff = c.w.c.cfg.RestartBackoff
		}
		c.mu.Lock()
		if c.state.Terminated != nil {
			c.last = c.state
		}
		reason := "CrashLoopBackOff"
		if err != nil {
			reason = reasonOf(err)
		}
		c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
			Reason: reason, Message: fmt.Sprintf("back-off %s restarting container %s: %v", backoff, c.spec.Name, orExit(err, code)),
		}}
		c.mu.Unlock()
		c.w.poke()
		select {
		case <-ctx.Done():
			return
		case <-c.stopCh:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, c.w.c.cfg.MaxRestartBackoff)
		if err == nil {
			c.mu.Lock()
			c.restarts++
			c.mu.Unlock()
		}
	}
}

func restarts(policy corev1.RestartPolicy, code int) bool {
	switch policy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return code != 0
	}
	return true
}

func orExit(err error, code int) string {
	if err != nil {
		return err.Error()
	}
	return "exit code " + strconv.Itoa(code)
}

// reasonOf names a creation failure as the kubelet would.
type reasonError struct {
	reason string
	err    error
}

func (e *reasonError) Error() string { return e.err.Error() }
func (e *reasonError) Unwrap() error { return e.err }

func withReason(reason string, err error) error {
	return &reasonError{reason: reason, err: fmt.Errorf("%w: %w", errCreate, err)}
}

func reasonOf(err error) string {
	var r *reasonError
	if errors.As(err, &r) {
		return r.reason
	}
	return "CreateContainerError"
}

// runOnce starts the process and waits for it to end, returning its exit code, or an error
// when it could not start.
func (c *container) runOnce(ctx context.Context) (int, error) {
	cmd, send, logFile, err := c.command(ctx)
	if err != nil {
		c.log.Info("Container not created", "error", err.Error())
		return 0, err
	}
	defer c.closeLog(logFile)
	if err := cmd.Start(); err != nil {
		return 0, withReason("StartError", err)
	}
	if err := send(); err != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		return 0, withReason("StartError", err)
	}
	exitCh := make(chan struct{})
	c.running(cmd.Process.Pid, exitCh)
	probeCtx, stopProbes := context.WithCancel(ctx)
	var probes sync.WaitGroup
	probes.Go(func() {
		// Readiness and liveness wait for the startup probe, as the kubelet's do.
		if !c.probe(probeCtx, c.spec.StartupProbe, startup) {
			return
		}
		c.setStarted()
		var more sync.WaitGroup
		more.Go(func() { c.probe(probeCtx, c.spec.ReadinessProbe, readiness) })
		more.Go(func() { c.probe(probeCtx, c.spec.LivenessProbe, liveness) })
		more.Wait()
	})
	waitErr := cmd.Wait()
	close(exitCh) // before waiting for the probes: a liveness kill waits for this
	stopProbes()
	probes.Wait()
	code := exitCode(cmd, waitErr)
	c.exited(code)
	return code, nil
}

// command builds the container init command: root filesystem made, environment resolved,
// volumes to mount. The environment is resolved at every start, as the kubelet does.
func (c *container) command(ctx context.Context) (*exec.Cmd, func() error, *containerlog.File, error) {
	w := c.w
	pod, _ := w.latest()
	run, err := c.prepare(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	env, err := w.env(ctx, pod, c.spec, run.imageEnv)
	if err != nil {
		return nil, nil, nil, withReason("CreateContainerConfigError", err)
	}
	argv := expandAll(run.argv, env)
	argv[0] = lookPath(run.root, argv[0], pathOf(env))
	user, err := c.user(pod, run.image)
	if err != nil {
		return nil, nil, nil, withReason("CreateContainerConfigError", err)
	}
	sysctls := podSysctls(pod)
	if err := sandbox.CheckSysctls(sysctls); err != nil {
		return nil, nil, nil, withReason("SysctlForbidden", err)
	}
	w.mu.Lock()
	netns := w.sb.NetNS()
	w.mu.Unlock()
	spec := &sandbox.Spec{
		NetNS: netns, Root: run.root, Hostname: hostname(pod), WorkDir: run.workDir,
		Mounts: w.mounts(pod, c.spec), Argv: argv, Env: env,
		User: user, ReadOnlyRoot: readOnlyRoot(c.spec), Sysctls: sysctls,
	}
	if err := sandbox.Prepare(spec); err != nil {
		return nil, nil, nil, withReason("CreateContainerError", err)
	}
	logFile, err := c.openLog()
	if err != nil {
		return nil, nil, nil, withReason("CreateContainerError", err)
	}
	cmd, send, err := sandbox.Command(w.c.cfg.Self, spec, logFile.Writer(containerlog.Stdout), logFile.Writer(containerlog.Stderr))
	if err != nil {
		c.closeLog(logFile)
		return nil, nil, nil, withReason("CreateContainerError", err)
	}
	// The output goes through pipes the Cmd copies from; a process that left children
	// holding them must not keep Wait from returning.
	cmd.WaitDelay = time.Second
	c.mu.Lock()
	c.imageID, c.root, c.imageEnv, c.workDir, c.runAs = run.imageID, run.root, run.imageEnv, run.workDir, user
	c.mu.Unlock()
	return cmd, send, logFile, nil
}

// run is what a container's image gives one run of it.
type run struct {
	root     string   // the root filesystem
	argv     []string // before $(VAR) expansion
	imageEnv []string // the image's environment; nil for a mapped binary
	workDir  string
	imageID  string
	image    *image.Image
}

// prepare makes the container's root filesystem. An image the image map names stands for one
// binary, installed into the pod's shared root; any other image is pulled from the registry
// that serves its name and its root filesystem copied afresh for each run, as a runtime gives
// each container a new writable layer, with the pod's /etc/hosts and /etc/resolv.conf.
func (c *container) prepare(ctx context.Context) (run, error) {
	w := c.w
	podRoot := filepath.Join(w.dir, "root")
	bin, mapErr := w.c.cfg.Images.Resolve(c.spec.Image)
	if mapErr == nil {
		argv, err := install(bin, podRoot, c.spec)
		if err != nil {
			return run{}, withReason("CreateContainerError", err)
		}
		// A mapped binary's image has no configuration: its user is root unless runAsUser says.
		img := &image.Image{Ref: c.spec.Image, Root: podRoot}
		return run{root: podRoot, argv: argv, workDir: c.spec.WorkingDir, imageID: "file://" + bin, image: img}, nil
	}
	if !w.c.cfg.Registry.Serves(c.spec.Image) {
		return run{}, withReason("ErrImagePull", fmt.Errorf("%w, and no registry the node pulls from serves it", mapErr))
	}
	img, err := w.c.cfg.Registry.Pull(ctx, c.spec.Image)
	if err != nil {
		return run{}, withReason("ErrImagePull", err)
	}
	argv := img.Command(c.spec.Command, c.spec.Args)
	if len(argv) == 0 {
		return run{}, withReason("CreateContainerError", fmt.Errorf("image %s: no command: the container gives none and the image has no entrypoint or cmd", c.spec.Image))
	}
	root := filepath.Join(w.dir, "containers", c.spec.Name)
	if err := os.RemoveAll(root); err != nil {
		return run{}, withReason("CreateContainerError", fmt.Errorf("remove the last run's root: %w", err))
	}
	if err := os.MkdirAll(filepath.Dir(root), 0o700); err != nil {
		return run{}, withReason("CreateContainerError", err)
	}
	if err := img.Copy(root); err != nil {
		return run{}, withReason("CreateContainerError", fmt.Errorf("image %s: copy its root filesystem: %w", c.spec.Image, err))
	}
	for _, f := range []string{"hosts", "resolv.conf"} {
		if err := copyEtc(podRoot, root, f); err != nil {
			return run{}, withReason("CreateContainerError", err)
		}
	}
	env := img.Config.Env
	if env == nil {
		env = []string{}
	}
	return run{root: root, argv: argv, imageEnv: env, workDir: img.WorkDir(c.spec.WorkingDir), imageID: imageID(img), image: img}, nil
}

// user decides who the container runs as, as the kubelet does: runAsUser and runAsGroup of the
// container, else of the pod, else the image's user; the pod's supplementalGroups and fsGroup
// join the group. runAsNonRoot refuses root, and a user the image names by name, which it cannot
// verify. A user the node's user namespace does not map (a cluster started by a user other than
// root maps only its root) cannot be taken: the container then runs as the namespace's root,
// and the agent logs it.
func (c *container) user(pod *corev1.Pod, img *image.Image) (*sandbox.User, error) {
	var runAsUser, runAsGroup *int64
	var nonRoot *bool
	if sc := pod.Spec.SecurityContext; sc != nil {
		runAsUser, runAsGroup, nonRoot = sc.RunAsUser, sc.RunAsGroup, sc.RunAsNonRoot
	}
	if sc := c.spec.SecurityContext; sc != nil {
		runAsUser, runAsGroup, nonRoot = cmp.Or(sc.RunAsUser, runAsUser), cmp.Or(sc.RunAsGroup, runAsGroup), cmp.Or(sc.RunAsNonRoot, nonRoot)
	}
	if nonRoot != nil && *nonRoot {
		switch {
		case runAsUser != nil && *runAsUser == 0:
			return nil, errors.New("container's runAsUser breaks non-root policy")
		case runAsUser == nil && img.NonNumericUser():
			return nil, fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root", img.Config.User)
		}
	}
	uid, gid, err := img.User(runAsUser, runAsGroup)
	if err != nil {
		return nil, err
	}
	if nonRoot != nil && *nonRoot && uid == 0 {
		return nil, errors.New("container has runAsNonRoot and image will run as root")
	}
	if !userns.Mapped(uid, gid) {
		if uid != 0 || gid != 0 {
			c.log.Info("The node's user namespace does not map the container's user: it runs as the namespace's root (start the cluster as root to map 65,536 ids)", "uid", uid, "gid", gid)
		}
		return nil, nil //nolint:nilnil // nil: stay the namespace's root
	}
	u := &sandbox.User{UID: uid, GID: gid, SetGroups: userns.SetgroupsAllowed()}
	if sc := pod.Spec.SecurityContext; sc != nil {
		for _, g := range append(append([]int64(nil), sc.SupplementalGroups...), ptrSlice(sc.FSGroup)...) {
			if g >= 0 && userns.GroupMapped(uint32(g)) { //nolint:gosec // checked non-negative
				u.Groups = append(u.Groups, uint32(g)) //nolint:gosec // as above
			}
		}
	}
	return u, nil
}

func ptrSlice(p *int64) []int64 {
	if p == nil {
		return nil
	}
	return []int64{*p}
}

// readOnlyRoot is the container's readOnlyRootFilesystem.
func readOnlyRoot(spec *corev1.Container) bool {
	return spec.SecurityContext != nil && spec.SecurityContext.ReadOnlyRootFilesystem != nil && *spec.SecurityContext.ReadOnlyRootFilesystem
}

// podSysctls are the sysctls of the pod's securityContext.
func podSysctls(pod *corev1.Pod) map[string]string {
	if pod.Spec.SecurityContext == nil || len(pod.Spec.SecurityContext.Sysctls) == 0 {
		return nil
	}
	out := map[string]string{}
	for _, s := range pod.Spec.SecurityContext.Sysctls {
		out[s.Name] = s.Value
	}
	return out
}

// imageID names the image by repository and digest, as a kubelet reports imageID: the digest
// the reference pins (an image index's, for a multi-platform image), else the pulled image's.
func imageID(img *image.Image) string {
	repo, digest := img.Ref, img.Digest
	if i := strings.IndexByte(repo, '@'); i >= 0 {
		repo, digest = repo[:i], repo[i+1:]
	}
	if i := strings.LastIndexByte(repo, ':'); i > strings.LastIndexByte(repo, '/') {
		repo = repo[:i]
	}
	return repo + "@" + digest
}

// copyEtc copies the pod's /etc/<name>, when it has one, into a container's root.
func copyEtc(podRoot, root, name string) error {
	data, err := os.ReadFile(filepath.Join(podRoot, "etc", name)) //nolint:gosec // the pod's own root
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil { //nolint:gosec // /etc, as in an image
		return err
	}
	dst := filepath.Join(root, "etc", name)
	_ = os.Remove(dst)                    // the image's own, or a link the image made: the pod's replaces it
	return os.WriteFile(dst, data, 0o644) //nolint:gosec // world-readable, as the kubelet writes them
}

// openLog opens the log of this run of the container, logs/<container>/<restart>.log under
// the pod's directory, in the CRI format, and marks it as written until the run ends.
func (c *container) openLog() (*containerlog.File, error) {
	dir := filepath.Join(c.w.dir, "logs", c.spec.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create log directory: %w", err)
	}
	c.mu.Lock()
	n := c.restarts
	c.mu.Unlock()
	f, err := containerlog.Create(logPath(dir, n))
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.logging = n
	c.mu.Unlock()
	return f, nil
}

func logPath(dir string, run int32) string { return filepath.Join(dir, fmt.Sprintf("%d.log", run)) }

// closeLog closes the run's log once the process and its output are done.
func (c *container) closeLog(f *containerlog.File) {
	if err := f.Close(); err != nil {
		c.log.Error(err, "Writing the container log failed")
	}
	c.mu.Lock()
	c.logging = -1
	c.mu.Unlock()
}

func (c *container) running(pid int, exitCh chan struct{}) {
	c.mu.Lock()
	c.pid, c.exitCh = pid, exitCh
	c.id = fmt.Sprintf("coxswain-node-agent://%s/%s/%d", c.w.dir, c.spec.Name, pid)
	c.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now()}}
	c.started = c.spec.StartupProbe == nil
	c.ready = c.spec.ReadinessProbe == nil && c.started
	stopping := c.stopping
	c.mu.Unlock()
	c.log.Info("Started container", "pid", pid)
	if stopping { // stop came between the check and the start: it saw no process to signal
		_ = syscall.Kill(-pid, syscall.SIGTERM)
	}
	c.w.poke()
}

func (c *container) exited(code int) {
	c.mu.Lock()
	startedAt := now()
	if c.state.Running != nil {
		startedAt = c.state.Running.StartedAt
	}
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	c.state = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: int32(code), Reason: reason, StartedAt: startedAt, FinishedAt: now(), ContainerID: c.id, //nolint:gosec // exit codes fit
	}}
	c.pid, c.ready, c.started = 0, false, false
	c.mu.Unlock()
	c.log.Info("Container exited", "exitCode", code)
	c.w.poke()
}

func exitCode(cmd *exec.Cmd, err error) int {
	if cmd.ProcessState == nil {
		return 128
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	if err != nil && cmd.ProcessState.ExitCode() < 0 {
		return 128
	}
	return cmd.ProcessState.ExitCode()
}

// stop ends the container for good: SIGTERM to its process group, SIGKILL after grace.
func (c *container) stop(grace time.Duration) {
	c.mu.Lock()
	if !c.stopping {
		c.stopping = true
		close(c.stopCh)
	}
	c.mu.Unlock()
	c.kill(grace)
	<-c.done
}

// kill signals the running process, if any, and kills it after grace; it returns once the
// process has exited.
func (c *container) kill(grace time.Duration) {
	c.mu.Lock()
	pid, exitCh := c.pid, c.exitCh
	c.mu.Unlock()
	if pid == 0 {
		return
	}
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-exitCh:
		return
	case <-timer.C:
	}
	c.log.Info("Killing container after its grace period", "pid", pid, "gracePeriod", grace.String())
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	<-exitCh
}

func (c *container) stopped() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopping
}

// exitCode returns the last exit code and whether the container has terminated.
func (c *container) exitCode() (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state.Terminated == nil {
		return 0, false
	}
	return int(c.state.Terminated.ExitCode), true
}

// install puts the image's binary into the pod's root and returns the container's argv. The
// binary goes where the command names it (an absolute command[0]), else to /<binary name>.
func install(bin, root string, spec *corev1.Container) ([]string, error) {
	target := "/" + filepath.Base(bin)
	argv := []string{target}
	if len(spec.Command) > 0 {
		target = spec.Command[0]
		if !filepath.IsAbs(target) {
			target = "/" + target
		}
		argv = append([]string{target}, spec.Command[1:]...)
	}
	argv = append(argv, spec.Args...)
	dst := filepath.Join(root, target)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil { //nolint:gosec // an image's directories are world-readable
		return nil, fmt.Errorf("install %s: %w", bin, err)
	}
	_ = os.Remove(dst) // a rebuilt binary replaces the old one at the next start
	if err := os.Link(bin, dst); err != nil {
		if err := copyFile(bin, dst); err != nil {
			return nil, fmt.Errorf("install %s: %w", bin, err)
		}
	}
	return argv, nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src) //nolint:gosec // a binary the image map names
	if err != nil {
		return err
	}
	defer in.Close()                                                        //nolint:errcheck // read only
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755) //nolint:gosec // an executable
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		return errors.Join(err, out.Close())
	}
	return out.Close()
}

// checkExec runs an exec probe's command as the container sees the world (its root, volumes,
// environment and network namespace) and passes when it exits 0 before ctx ends.
func (c *container) checkExec(ctx context.Context, command []string) error {
	w := c.w
	pod, _ := w.latest()
	c.mu.Lock()
	imageEnv := c.imageEnv
	c.mu.Unlock()
	env, err := w.env(ctx, pod, c.spec, imageEnv)
	if err != nil {
		return fmt.Errorf("exec probe: %w", err)
	}
	c.mu.Lock()
	root := c.root
	c.mu.Unlock()
	if root == "" {
		return errors.New("exec probe: the container has not started")
	}
	argv := expandAll(command, env)
	if len(argv) == 0 {
		return errors.New("exec probe: no command")
	}
	argv[0] = lookPath(root, argv[0], pathOf(env))
	w.mu.Lock()
	netns := w.sb.NetNS()
	w.mu.Unlock()
	c.mu.Lock()
	workDir, user := c.workDir, c.runAs
	c.mu.Unlock()
	spec := &sandbox.Spec{
		NetNS: netns, Root: root, Hostname: hostname(pod), WorkDir: workDir, Mounts: w.mounts(pod, c.spec), Argv: argv, Env: env,
		User: user, ReadOnlyRoot: readOnlyRoot(c.spec),
	}
	var out limitedBuffer
	cmd, send, err := sandbox.Command(w.c.cfg.Self, spec, &out, &out)
	if err != nil {
		return fmt.Errorf("exec probe: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("exec probe: %w", err)
	}
	if err := send(); err != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return errors.Join(fmt.Errorf("exec probe: %w", err), cmd.Wait())
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return errors.Join(fmt.Errorf("exec probe: %w", ctx.Err()), <-done)
	}
	if err != nil {
		return fmt.Errorf("exec probe %v: %w: %s", command, err, out.String())
	}
	return nil
}

// pathOf is the PATH of an environment, the default when it sets none.
func pathOf(env []string) string {
	for _, kv := range slices.Backward(env) {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			return v
		}
	}
	return defaultPath
}

// lookPath finds a command without a slash in the directories of path (the container's PATH)
// inside root, as a runtime does; the root directory is tried first for a mapped binary, which
// is installed there. A command with a slash, or one not found, is returned as it is.
func lookPath(root, name, path string) string {
	if strings.Contains(name, "/") {
		return name
	}
	for _, dir := range append([]string{"/"}, filepath.SplitList(path)...) {
		p := filepath.Join(dir, name)
		if info, err := os.Stat(filepath.Join(root, p)); err == nil && !info.IsDir() {
			return p
		}
	}
	return name
}

// limitedBuffer keeps the first KiB of a probe's output for its failure message.
type limitedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := 1024 - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (b *limitedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
