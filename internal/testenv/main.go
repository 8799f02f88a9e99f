package testenv

import (
	"fmt"
	"os"
	"testing"

	"k8s.io/client-go/rest"
)

// Options select what runs besides etcd and kube-apiserver.
type Options struct {
	// ControllerManager also runs kube-controller-manager with the garbage collector and the
	// Deployment and ReplicaSet controllers.
	ControllerManager bool
}

// Main runs a package's tests against one shared control plane: it starts it, calls setup with
// its configuration (to build clients and shared fixtures), runs the tests and stops it. It
// returns the exit code for os.Exit, printing why when the control plane or setup failed.
//
//	func TestMain(m *testing.M) { os.Exit(testenv.Main(m, setup)) }
func Main(m *testing.M, setup func(*rest.Config) error) int {
	return MainWith(m, Options{}, setup)
}

// MainWith is Main with opts.
func MainWith(m *testing.M, opts Options, setup func(*rest.Config) error) int {
	env, err := New()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "start control plane: %v\n", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop control plane: %v\n", err)
		}
	}()
	if opts.ControllerManager {
		cm, err := startControllerManager(env, env.BinaryAssetsDirectory)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() {
			if err := cm.stop(); err != nil {
				fmt.Fprintf(os.Stderr, "stop controller manager: %v\n", err)
			}
		}()
	}
	if err := setup(cfg); err != nil {
		fmt.Fprintf(os.Stderr, "set up the test suite: %v\n", err)
		return 1
	}
	return m.Run()
}
