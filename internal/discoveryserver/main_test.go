package discoveryserver

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/stream"
	"coxswain.dev/coxswain/internal/readiness"
	"coxswain.dev/coxswain/internal/settings"
	"coxswain.dev/coxswain/internal/testenv"
	"coxswain.dev/coxswain/internal/testlog"
)

var (
	restConfig *rest.Config
	clientset  kubernetes.Interface
	scheme     *runtime.Scheme
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, setup))
}

func setup(cfg *rest.Config) (err error) {
	restConfig = cfg
	scheme = runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), v1alpha1.AddToScheme(scheme)); err != nil {
		return err
	}
	clientset, err = kubernetes.NewForConfig(cfg)
	return err
}

// controller is one operator replica: a manager running the discovery components as main.go
// wires them.
type controller struct {
	*Components
	board    *readiness.Board
	settings *settings.Store
	// snapshots is what the stream listener serves; answered counts the OnAnswer calls.
	snapshots *cache.Cache
	answered  atomic.Int64
	stop      func()
}

// startController runs a replica in namespace with s until the test ends or stop is called.
func startController(t *testing.T, namespace string, s settings.Settings) *controller {
	t.Helper()
	return startControllerWith(t, restConfig, testlog.New(t), namespace, s)
}

// startControllerWith is startController on config, logging to logger.
func startControllerWith(t *testing.T, config *rest.Config, logger logr.Logger, namespace string, s settings.Settings) *controller {
	t.Helper()
	return startControllerStore(t, config, logger, namespace, settings.NewStore(s))
}

// startControllerStore is startControllerWith on a store of the test's.
func startControllerStore(t *testing.T, config *rest.Config, logger logr.Logger, namespace string, store *settings.Store) *controller {
	t.Helper()
	mgr, err := ctrl.NewManager(config, ctrl.Options{
		Scheme: scheme, Logger: logger, Metrics: metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	c := &controller{
		board:     readiness.NewBoard(v1alpha1.ConditionCAReady, v1alpha1.ConditionDiscoveryServing, v1alpha1.ConditionTrustBundlePublished),
		settings:  store,
		snapshots: cache.New(time.Now),
	}
	c.Components, err = Setup(mgr, SetupOptions{
		Namespace: namespace, PodName: "coxswain-controller-0", ConfigName: "coxswain",
		Settings: c.settings, Board: c.board, Host: "127.0.0.1",
		Snapshots: c.snapshots, Scopes: noGateways{},
		OnAnswer: func(cache.Scope) { c.answered.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	var once sync.Once
	c.stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(c.stop)
	return c
}

// noGateways knows no dedicated Gateway.
type noGateways struct{}

func (noGateways) ExpectedServiceAccount(_, _ string) (string, error) {
	return "", stream.ErrUnknownGateway
}

// testSettings are the defaults with free loopback ports.
func testSettings(t *testing.T) settings.Settings {
	t.Helper()
	s := settings.Defaults()
	s.BootstrapPort, s.Port = freePort(t), freePort(t)
	return s
}

func freePort(t *testing.T) int32 {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return int32(lis.Addr().(*net.TCPAddr).Port) //nolint:gosec // a TCP port fits
}

func newNamespace(t *testing.T, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := clientset.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	return name
}

// waitListening waits for the runner to announce addresses matching want.
func (c *controller) waitListening(t *testing.T, want func(Addrs) bool) Addrs {
	t.Helper()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	for {
		select {
		case a := <-c.Runner.Listening():
			if want(a) {
				return a
			}
		case <-timer.C:
			t.Fatal("timed out waiting for the listeners")
		}
	}
}

func serving(a Addrs) bool { return a.Bootstrap != "" }

// waitCondition waits until the board's condition has status and reason.
func (c *controller) waitCondition(t *testing.T, condType string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	eventually(t, 30*time.Second, condType+" "+reason, func() bool {
		for _, cond := range c.board.Conditions() {
			if cond.Type == condType {
				return cond.Status == status && cond.Reason == reason
			}
		}
		return false
	})
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond) // polling interval, not synchronisation
	}
}

// refused reports whether nothing listens on addr.
func refused(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return true
	}
	_ = conn.Close()
	return false
}
