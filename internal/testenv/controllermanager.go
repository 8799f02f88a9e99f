package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// controllerManager is a kube-controller-manager running against an envtest control plane
// with the controllers a test of owned workloads needs: garbage collection, and Deployments to
// ReplicaSets to Pods.
type controllerManager struct {
	cmd  *exec.Cmd
	dir  string
	done chan struct{}
}

// startControllerManager runs kube-controller-manager from the assets directory as a
// system:masters user of env.
func startControllerManager(env *envtest.Environment, assets string) (*controllerManager, error) {
	user, err := env.AddUser(envtest.User{Name: "kube-controller-manager", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("add controller manager user: %w", err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return nil, fmt.Errorf("controller manager kubeconfig: %w", err)
	}
	dir, err := os.MkdirTemp("", "kcm-")
	if err != nil {
		return nil, fmt.Errorf("controller manager directory: %w", err)
	}
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		return nil, errors.Join(fmt.Errorf("write controller manager kubeconfig: %w", err), os.RemoveAll(dir))
	}
	cmd := exec.CommandContext(context.Background(), filepath.Join(assets, "kube-controller-manager"), //nolint:gosec // the pinned binary of the assets directory
		"--kubeconfig="+path,
		"--controllers=garbage-collector-controller,deployment-controller,replicaset-controller",
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=false",
		"--concurrent-gc-syncs=5",
	)
	if os.Getenv("COXSWAIN_TEST_LOG") != "" {
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	}
	if err := cmd.Start(); err != nil {
		return nil, errors.Join(fmt.Errorf("start kube-controller-manager: %w", err), os.RemoveAll(dir))
	}
	cm := &controllerManager{cmd: cmd, dir: dir, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // it ends by stop's signal: its exit status says nothing
		close(cm.done)
	}()
	return cm, nil
}

// stop terminates the controller manager, waiting up to ten seconds before killing it.
func (cm *controllerManager) stop() error {
	_ = cm.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-cm.done:
	case <-time.After(10 * time.Second):
		_ = cm.cmd.Process.Kill()
		<-cm.done
	}
	return os.RemoveAll(cm.dir)
}
