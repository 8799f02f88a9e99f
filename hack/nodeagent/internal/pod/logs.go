package pod

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Errors of LogFile, for the kubelet API to answer with the right status.
var (
	// ErrNoPod: no pod of that name runs on the node, or it has no such container.
	ErrNoPod = errors.New("not found")
	// ErrNoLog: the container exists but has no log of the run asked for (it has not started,
	// or there is no previous run).
	ErrNoLog = errors.New("no log")
)

// LogFile returns the log file of a container's current run, or of the run before it when
// previous is set, and a function that reports whether that run is still writing it.
func (c *Controller) LogFile(namespace, podName, containerName string, previous bool) (string, func() bool, error) {
	ct := c.find(namespace, podName, containerName)
	if ct == nil {
		return "", nil, fmt.Errorf("container %s of pod %s/%s: %w", containerName, namespace, podName, ErrNoPod)
	}
	ct.mu.Lock()
	run := ct.restarts
	ct.mu.Unlock()
	what := "current"
	if previous {
		run--
		what = "previous terminated"
	}
	path := logPath(filepath.Join(ct.w.dir, "logs", containerName), run)
	if _, err := os.Stat(path); run < 0 || err != nil {
		return "", nil, fmt.Errorf("%s container %s of pod %s/%s: %w", what, containerName, namespace, podName, ErrNoLog)
	}
	live := func() bool {
		ct.mu.Lock()
		defer ct.mu.Unlock()
		return ct.logging == run
	}
	return path, live, nil
}

// find returns the container of the named pod, or nil.
func (c *Controller) find(namespace, podName, containerName string) *container {
	c.mu.Lock()
	workers := make([]*worker, 0, len(c.workers))
	for _, w := range c.workers {
		workers = append(workers, w)
	}
	c.mu.Unlock()
	for _, w := range workers {
		pod, _ := w.latest()
		if pod.Namespace != namespace || pod.Name != podName {
			continue
		}
		for _, ct := range w.all() {
			if ct.spec.Name == containerName {
				return ct
			}
		}
	}
	return nil
}
