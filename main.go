// Command coxswain is the Coxswain operator: it watches Gateway API objects and its own
// CoxswainConfig, and runs the discovery server that secures the channel to its proxies.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwapiv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/controllers"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/readiness"
	"coxswain.dev/coxswain/internal/settings"
)

type options struct {
	namespace      string
	configName     string
	metricsAddr    string
	probeAddr      string
	leaderElection bool
	settings       *settings.Flags
	zap            zap.Options
}

func main() {
	opts := parseFlags(flag.CommandLine, os.Args[1:])
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts.zap)))
	if err := run(opts); err != nil {
		ctrl.Log.Error(err, "Operator stopped")
		os.Exit(1)
	}
}

func parseFlags(fs *flag.FlagSet, args []string) *options {
	o := &options{}
	defaultNamespace := wellknown.InstallNamespace
	if ns, ok := os.LookupEnv("POD_NAMESPACE"); ok && ns != "" {
		defaultNamespace = ns
	}
	fs.StringVar(&o.namespace, "namespace", defaultNamespace, "The operator's own namespace (env POD_NAMESPACE).")
	fs.StringVar(&o.configName, "config-name", "coxswain", "Name of the CoxswainConfig the operator reads in its namespace.")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "Address of the metrics endpoint; 0 disables it.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address of the health probe endpoint.")
	fs.BoolVar(&o.leaderElection, "leader-elect", false, "Elect a leader; only the leader writes status and provisions proxies.")
	o.settings = settings.RegisterFlags(fs, os.LookupEnv)
	o.zap.BindFlags(fs)
	_ = fs.Parse(args) // flag.ExitOnError: Parse exits on a bad flag
	return o
}

func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	err := errors.Join(
		clientgoscheme.AddToScheme(s),
		v1alpha1.AddToScheme(s),
		gwapiv1.Install(s),
		gwapiv1beta1.Install(s),
	)
	return s, err
}

func run(o *options) error {
	base, err := o.settings.Settings()
	if err != nil {
		return fmt.Errorf("read settings from flags and environment: %w", err)
	}
	scheme, err := newScheme()
	if err != nil {
		return fmt.Errorf("build scheme: %w", err)
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress:  o.probeAddr,
		LeaderElection:          o.leaderElection,
		LeaderElectionID:        "coxswain-controller",
		LeaderElectionNamespace: o.namespace,
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&v1alpha1.CoxswainConfig{}: {Namespaces: map[string]cache.Config{o.namespace: {}}},
		}},
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	store := settings.NewStore(base)
	board := readiness.NewBoard(v1alpha1.ConditionCAReady, v1alpha1.ConditionDiscoveryServing, v1alpha1.ConditionTrustBundlePublished)
	elected := mgr.Elected()
	cfg := &controllers.CoxswainConfigReconciler{
		Client:   mgr.GetClient(),
		Key:      types.NamespacedName{Namespace: o.namespace, Name: o.configName},
		Base:     base,
		Store:    store,
		Board:    board,
		Recorder: mgr.GetEventRecorder("coxswain"),
		IsLeader: func() bool { return isClosed(elected) },
	}
	if err := cfg.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up CoxswainConfig controller: %w", err)
	}
	if err := errors.Join(mgr.AddHealthzCheck("healthz", healthz.Ping), mgr.AddReadyzCheck("readyz", healthz.Ping)); err != nil {
		return fmt.Errorf("add health checks: %w", err)
	}
	ctrl.Log.Info("Starting operator", "namespace", o.namespace, "config", o.configName)
	return mgr.Start(ctrl.SetupSignalHandler())
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
