package pod

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"

	"coxswain.dev/coxswain/hack/nodeagent/internal/containerlog"
	"coxswain.dev/coxswain/hack/nodeagent/internal/sandbox"
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
	image    string        // the binary the image stands for
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

// command builds the container init command: binary installed in the pod's root, environment
// resolved, volumes to mount. The environment is resolved at every start, as the kubelet does.
func (c *container) command(ctx context.Context) (*exec.Cmd, func() error, *containerlog.File, error) {
	w := c.w
	pod, _ := w.latest()
	bin, err := w.c.cfg.Images.Resolve(c.spec.Image)
	if err != nil {
		return nil, nil, nil, withReason("ErrImagePull", err)
	}
	root := filepath.Join(w.dir, "root")
	argv, err := install(bin, root, c.spec)
	if err != nil {
		return nil, nil, nil, withReason("CreateContainerError", err)
	}
	env, err := w.env(ctx, pod, c.spec)
	if err != nil {
		return nil, nil, nil, withReason("CreateContainerConfigError", err)
	}
	w.mu.Lock()
	netns := w.sb.NetNS()
	w.mu.Unlock()
	spec := &sandbox.Spec{
		NetNS: netns, Root: root, Hostname: hostname(pod), WorkDir: c.spec.WorkingDir,
		Mounts: w.mounts(pod, c.spec), Argv: expandAll(argv, env), Env: env,
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
	c.image = bin
	c.mu.Unlock()
	return cmd, send, logFile, nil
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
	env, err := w.env(ctx, pod, c.spec)
	if err != nil {
		return fmt.Errorf("exec probe: %w", err)
	}
	root := filepath.Join(w.dir, "root")
	argv := expandAll(command, env)
	if len(argv) == 0 {
		return errors.New("exec probe: no command")
	}
	argv[0] = lookPath(root, argv[0])
	w.mu.Lock()
	netns := w.sb.NetNS()
	w.mu.Unlock()
	spec := &sandbox.Spec{NetNS: netns, Root: root, Hostname: hostname(pod), WorkDir: c.spec.WorkingDir, Mounts: w.mounts(pod, c.spec), Argv: argv, Env: env}
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

// lookPath finds a relative command in the container's PATH directories inside root, as a
// shell in the image would; an absolute one, or one not found, is returned as it is.
func lookPath(root, name string) string {
	if filepath.IsAbs(name) {
		return name
	}
	for _, dir := range append([]string{"/"}, filepath.SplitList(defaultPath)...) {
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
