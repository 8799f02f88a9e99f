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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"coxswain.dev/coxswain/hack/nodeagent/internal/image"
	"coxswain.dev/coxswain/hack/nodeagent/internal/sandbox"
	"coxswain.dev/coxswain/hack/nodeagent/internal/volume"
)

// Config is what the pod workers share.
type Config struct {
	// Node is the name of the agent's Node.
	Node string
	// StateDir holds a directory per pod: its root, volumes and container logs.
	StateDir string
	// Self is the agent's own binary, which runs as pause process and container init.
	Self string
	// Images maps image names to the binaries they stand for; Registry pulls the images the
	// map does not name (nil: none).
	Images   image.Map
	Registry *image.Store
	Network  *sandbox.Network
	// RestartBackoff is the first delay before a container restart, doubled up to
	// MaxRestartBackoff; it starts over after a container ran for ten minutes.
	RestartBackoff, MaxRestartBackoff time.Duration
	// APIServer is the host:port pods reach the API server on, given to containers as
	// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT; empty leaves them out.
	APIServer string
	// VolumeRefresh is how often Secret, ConfigMap and downward API volumes are rewritten.
	VolumeRefresh time.Duration
	// Nameserver is the cluster DNS address written to the /etc/resolv.conf of pods of policy
	// ClusterFirst; empty writes none. ClusterDomain is the cluster's DNS domain.
	Nameserver, ClusterDomain string
}

// Controller watches the pods, binds the unscheduled ones and runs a worker per pod of the node.
type Controller struct {
	client kubernetes.Interface
	cfg    Config
	log    logr.Logger

	ctx     context.Context // the informer's callbacks start workers that live as long as Run
	mu      sync.Mutex
	workers map[types.UID]*worker
	binding map[types.UID]bool
	wg      sync.WaitGroup
}

// New returns a Controller.
func New(client kubernetes.Interface, cfg Config, log logr.Logger) *Controller {
	if cfg.RestartBackoff == 0 {
		cfg.RestartBackoff = 10 * time.Second
	}
	if cfg.MaxRestartBackoff == 0 {
		cfg.MaxRestartBackoff = 5 * time.Minute
	}
	if cfg.VolumeRefresh == 0 {
		cfg.VolumeRefresh = time.Minute
	}
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = "cluster.local"
	}
	return &Controller{
		client: client, cfg: cfg, log: log.WithName("pods"),
		workers: map[types.UID]*worker{}, binding: map[types.UID]bool{},
	}
}

// Run watches pods until ctx ends, then stops every pod's processes (leaving the pod objects
// for the agent's next start) and returns.
func (c *Controller) Run(ctx context.Context) error {
	c.ctx = ctx
	// Pod directories of an earlier run are stale: their processes ended with it, and its pods
	// start again from scratch.
	if err := volume.Unmount(filepath.Join(c.cfg.StateDir, "pods")); err != nil {
		return fmt.Errorf("unmount stale pod volumes: %w", err)
	}
	if err := os.RemoveAll(filepath.Join(c.cfg.StateDir, "pods")); err != nil {
		return fmt.Errorf("remove stale pod directories: %w", err)
	}
	factory := informers.NewSharedInformerFactory(c.client, 0)
	informer := factory.Core().V1().Pods().Informer()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onPod,
		UpdateFunc: func(_, obj any) { c.onPod(obj) },
		DeleteFunc: c.onDelete,
	}); err != nil {
		return fmt.Errorf("watch pods: %w", err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return errors.New("watch pods: the cache never synced")
	}
	c.log.Info("Watching pods", "node", c.cfg.Node)
	<-ctx.Done()
	c.wg.Wait()
	factory.Shutdown()
	return nil
}

func (c *Controller) onPod(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	switch pod.Spec.NodeName {
	case "":
		if pod.DeletionTimestamp == nil && len(pod.Spec.SchedulingGates) == 0 {
			c.bind(pod)
		}
	case c.cfg.Node:
		c.dispatch(pod)
	}
}

func (c *Controller) onDelete(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	c.mu.Lock()
	w := c.workers[pod.UID]
	c.mu.Unlock()
	if w != nil {
		w.gone()
	}
}

// dispatch hands pod to its worker, starting one for a pod new to the node.
func (c *Controller) dispatch(pod *corev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w := c.workers[pod.UID]; w != nil {
		w.update(pod)
		return
	}
	if c.ctx.Err() != nil {
		return
	}
	terminal := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	if terminal && pod.DeletionTimestamp == nil {
		return // finished before this agent started: nothing to run
	}
	w := newWorker(c, pod)
	c.workers[pod.UID] = w
	c.wg.Go(func() {
		w.run(c.ctx)
		c.mu.Lock()
		delete(c.workers, pod.UID)
		c.mu.Unlock()
	})
}

// bind assigns pod to the agent's node (pods/binding), retrying a few times; a pod another
// binder took, or that went away, is left alone.
func (c *Controller) bind(pod *corev1.Pod) {
	c.mu.Lock()
	if c.binding[pod.UID] || c.ctx.Err() != nil {
		c.mu.Unlock()
		return
	}
	c.binding[pod.UID] = true
	c.mu.Unlock()
	c.wg.Go(func() {
		defer func() {
			c.mu.Lock()
			delete(c.binding, pod.UID)
			c.mu.Unlock()
		}()
		b := &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: c.cfg.Node},
		}
		delay := 200 * time.Millisecond
		for range 5 {
			err := c.client.CoreV1().Pods(pod.Namespace).Bind(c.ctx, b, metav1.CreateOptions{})
			if err == nil {
				c.log.Info("Bound pod", "pod", klogKey(pod))
				return
			}
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) || c.ctx.Err() != nil {
				return
			}
			c.log.Error(err, "Binding failed", "pod", klogKey(pod))
			select {
			case <-c.ctx.Done():
				return
			case <-time.After(delay):
			}
			delay *= 2
		}
	})
}

func klogKey(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name }
