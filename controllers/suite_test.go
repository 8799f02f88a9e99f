package controllers

import (
	"context"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/internal/testenv"
)

// The suite shares one real kube-apiserver and etcd; each test works in its own namespace.
var (
	cfg       *rest.Config
	k8sClient client.Client
	scheme    = runtime.NewScheme()
)

func TestMain(m *testing.M) {
	os.Exit(testenv.MainWith(m, testenv.Options{ControllerManager: true}, setup))
}

func setup(restConfig *rest.Config) (err error) {
	logs := io.Discard
	if os.Getenv("COXSWAIN_TEST_LOG") != "" {
		logs = os.Stderr
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(logs)))
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), v1alpha1.AddToScheme(scheme)); err != nil {
		return err
	}
	cfg = restConfig
	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme})
	return err
}

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"}}
	if err := k8sClient.Create(context.Background(), ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return ns.Name
}

// startManager runs a manager with setup applied until the test ends.
func startManager(t *testing.T, setup func(ctrl.Manager) error) {
	t.Helper()
	runManager(t, ctrl.Options{Scheme: scheme}, setup)
}

// runManager runs a manager of opts (without a metrics listener, and with controller names
// allowed to repeat: one controller per test) with setup applied until the test ends, and
// returns it.
func runManager(t *testing.T, opts ctrl.Options, setup func(ctrl.Manager) error) ctrl.Manager {
	t.Helper()
	opts.Metrics = metricsserver.Options{BindAddress: "0"}
	opts.Controller = config.Controller{SkipNameValidation: ptr.To(true)}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		t.Fatalf("create manager: %v", err)
	}
	if err := setup(mgr); err != nil {
		t.Fatalf("set up manager: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	return mgr
}

// eventually polls cond until it returns nil or the deadline passes.
func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: still failing after 20s: %v", what, err)
}
