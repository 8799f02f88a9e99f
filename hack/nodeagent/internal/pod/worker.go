package pod

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"coxswain.dev/coxswain/hack/nodeagent/internal/dns"
	"coxswain.dev/coxswain/hack/nodeagent/internal/sandbox"
	"coxswain.dev/coxswain/hack/nodeagent/internal/volume"
)

// stopOnAgentExit is how long the processes get to stop when the agent itself stops.
const stopOnAgentExit = 2 * time.Second

// worker runs one pod. Its run loop owns the pod's lifecycle; container supervisors and probes
// report through changed, and every change ends in a status write when the status differs.
type worker struct {
	c       *Controller
	log     logr.Logger
	dir     string
	vols    *volume.Set
	changed chan struct{}

	mu          sync.Mutex
	pod         *corev1.Pod // latest seen
	deleted     bool        // the object is gone from the API
	sb          *sandbox.Sandbox
	started     metav1.Time
	waitReason  string // why containers are not created yet
	waitMessage string
	inits       []*container
	initialized bool
	initFailed  bool
	containers  []*container
}

func newWorker(c *Controller, pod *corev1.Pod) *worker {
	dir := filepath.Join(c.cfg.StateDir, "pods", string(pod.UID))
	return &worker{
		c:       c,
		log:     c.log.WithValues("pod", klogKey(pod)),
		dir:     dir,
		vols:    volume.New(c.client, filepath.Join(dir, "volumes")),
		changed: make(chan struct{}, 1),
		pod:     pod,
		started: now(),
	}
}

func (w *worker) update(pod *corev1.Pod) {
	w.mu.Lock()
	w.pod = pod
	w.mu.Unlock()
	w.poke()
}

func (w *worker) gone() {
	w.mu.Lock()
	w.deleted = true
	w.mu.Unlock()
	w.poke()
}

// poke tells the run loop that something changed.
func (w *worker) poke() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *worker) latest() (*corev1.Pod, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pod, w.deleted
}

func (w *worker) run(ctx context.Context) {
	if pod, _ := w.latest(); pod.DeletionTimestamp != nil {
		w.terminate(ctx, pod, false) // nothing runs yet: only the final delete is left
		return
	}
	startCtx, stopStart := context.WithCancel(ctx)
	defer stopStart()
	setUp := make(chan struct{})
	go func() {
		defer close(setUp)
		w.start(startCtx)
	}()
	refresh := time.NewTicker(w.c.cfg.VolumeRefresh)
	defer refresh.Stop()
	for {
		select {
		case <-ctx.Done():
			stopStart()
			<-setUp
			w.stopAll(stopOnAgentExit)
			return
		case <-w.changed:
			pod, deleted := w.latest()
			if deleted || pod.DeletionTimestamp != nil {
				stopStart()
				<-setUp
				w.terminate(ctx, pod, deleted)
				return
			}
			w.writeStatus(ctx, pod)
		case <-refresh.C:
			w.refreshVolumes(ctx)
		}
		if next := w.vols.NextTokenRefresh(); !next.IsZero() && time.Now().After(next) {
			w.refreshVolumes(ctx)
		}
	}
}

// start sets the pod up and starts its containers; it gives up when ctx ends.
func (w *worker) start(ctx context.Context) {
	root := filepath.Join(w.dir, "root")
	if !w.retry(ctx, "SandboxCreating", func() error { return w.startSandbox(ctx, root) }) {
		return
	}
	if !w.retry(ctx, "ContainerCreating", func() error {
		pod, _ := w.latest()
		return w.vols.Sync(ctx, pod)
	}) {
		return
	}
	w.setWaiting("", "")
	pod, _ := w.latest()
	if !w.runInits(ctx, pod) {
		return
	}
	w.mu.Lock()
	w.initialized = true
	for i := range pod.Spec.Containers {
		c := newContainer(w, &pod.Spec.Containers[i], false)
		w.containers = append(w.containers, c)
		go c.supervise(ctx, pod.Spec.RestartPolicy)
	}
	w.mu.Unlock()
	w.poke()
}

// retry runs step until it succeeds, reporting reason and the error as the containers' waiting
// state meanwhile; it returns false when ctx ended first.
func (w *worker) retry(ctx context.Context, reason string, step func() error) bool {
	delay := 500 * time.Millisecond
	for {
		err := step()
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		w.log.Info("Pod setup waits", "reason", reason, "error", err.Error())
		w.setWaiting(reason, err.Error())
		select {
		case <-ctx.Done():
			return false
		case <-time.After(delay):
		}
		delay = min(2*delay, 10*time.Second)
	}
}

func (w *worker) setWaiting(reason, message string) {
	w.mu.Lock()
	w.waitReason, w.waitMessage = reason, message
	w.mu.Unlock()
	w.poke()
}

func (w *worker) startSandbox(ctx context.Context, root string) error {
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil { //nolint:gosec // a pod's root, readable as an image's
		return fmt.Errorf("create pod root: %w", err)
	}
	pod, _ := w.latest()
	sb, err := w.c.cfg.Network.Start(ctx, w.c.cfg.Self, string(pod.UID))
	if err != nil {
		return err
	}
	// /etc/hosts names the pod by its hostname, as the kubelet writes it; /etc/resolv.conf points
	// at the cluster DNS.
	hosts := fmt.Sprintf("127.0.0.1\tlocalhost\n::1\tlocalhost\n%s\t%s\n", sb.IP, hostname(pod))
	if err := os.WriteFile(filepath.Join(root, "etc", "hosts"), []byte(hosts), 0o644); err != nil { //nolint:gosec // /etc/hosts is world-readable
		return errors.Join(fmt.Errorf("write /etc/hosts: %w", err), sb.Stop())
	}
	if conf, ok := dns.ResolvConf(pod, w.c.cfg.Nameserver, w.c.cfg.ClusterDomain); ok {
		if err := os.WriteFile(filepath.Join(root, "etc", "resolv.conf"), []byte(conf), 0o644); err != nil { //nolint:gosec // /etc/resolv.conf is world-readable
			return errors.Join(fmt.Errorf("write /etc/resolv.conf: %w", err), sb.Stop())
		}
	}
	w.mu.Lock()
	w.sb = sb
	w.mu.Unlock()
	w.log.Info("Started pod sandbox", "podIP", sb.IP.String())
	w.poke()
	return nil
}

// runInits runs the init containers one after the other to completion; it returns false
// when one failed for good or ctx ended.
func (w *worker) runInits(ctx context.Context, pod *corev1.Pod) bool {
	policy := pod.Spec.RestartPolicy
	if policy == corev1.RestartPolicyAlways {
		policy = corev1.RestartPolicyOnFailure // init containers run to completion
	}
	for i := range pod.Spec.InitContainers {
		c := newContainer(w, &pod.Spec.InitContainers[i], true)
		w.mu.Lock()
		w.inits = append(w.inits, c)
		w.mu.Unlock()
		c.supervise(ctx, policy)
		if ctx.Err() != nil || c.stopped() {
			return false
		}
		if code, done := c.exitCode(); !done || code != 0 {
			w.mu.Lock()
			w.initFailed = true
			w.mu.Unlock()
			w.poke()
			return false
		}
	}
	return true
}

func (w *worker) refreshVolumes(ctx context.Context) {
	pod, deleted := w.latest()
	w.mu.Lock()
	ready := w.sb != nil
	w.mu.Unlock()
	if deleted || !ready {
		return
	}
	if err := w.vols.Sync(ctx, pod); err != nil && ctx.Err() == nil {
		w.log.Error(err, "Refreshing volumes failed")
	}
}

// all returns every container the worker started, init containers first.
func (w *worker) all() []*container {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append(append([]*container(nil), w.inits...), w.containers...)
}

// stopAll stops every container with grace, then the sandbox, and removes the pod's directory.
func (w *worker) stopAll(grace time.Duration) {
	var wg sync.WaitGroup
	for _, c := range w.all() {
		wg.Go(func() { c.stop(grace) })
	}
	wg.Wait()
	w.mu.Lock()
	sb := w.sb
	w.sb = nil
	w.mu.Unlock()
	if sb != nil {
		_ = sb.Stop() // ending the pause process cannot fail in a way worth reporting
	}
	if err := volume.Unmount(w.dir); err != nil {
		w.log.Error(err, "Unmounting the pod's memory-backed volumes failed")
	}
	if err := os.RemoveAll(w.dir); err != nil {
		w.log.Error(err, "Removing the pod directory failed")
	}
}

// terminate stops a deleted pod's processes within its grace period and, unless the object is
// already gone, deletes it for good (grace period zero, preconditioned on its UID).
func (w *worker) terminate(ctx context.Context, pod *corev1.Pod, deleted bool) {
	grace := gracePeriod(pod)
	w.log.Info("Stopping pod", "gracePeriod", grace.String())
	w.stopAll(grace)
	if deleted {
		return
	}
	err := w.c.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		w.log.Error(err, "Final delete failed")
		return
	}
	w.log.Info("Deleted pod")
}

func gracePeriod(pod *corev1.Pod) time.Duration {
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		return time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return 30 * time.Second
}

// writeStatus writes the pod's status when it differs from what the API holds. A conflict is
// left to the next update, which brings the newer object; other failures retry shortly.
func (w *worker) writeStatus(ctx context.Context, pod *corev1.Pod) {
	want := w.status(pod)
	if apiequality.Semantic.DeepEqual(pod.Status, want) {
		return
	}
	next := pod.DeepCopy()
	next.Status = want
	_, err := w.c.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, next, metav1.UpdateOptions{})
	switch {
	case err == nil:
		w.log.V(1).Info("Wrote pod status", "phase", string(want.Phase))
	case apierrors.IsConflict(err), apierrors.IsNotFound(err), ctx.Err() != nil:
	default:
		w.log.Error(err, "Writing pod status failed")
		time.AfterFunc(time.Second, w.poke)
	}
}
