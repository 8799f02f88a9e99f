// Command coxswain is the Coxswain operator: it watches Gateway API objects and its own
// CoxswainConfig, and runs the discovery server that secures the channel to its proxies.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwapiv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/controllers"
	"coxswain.dev/coxswain/discovery/buildinfo"
	snapcache "coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/tracing"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/discoveryserver"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/identity"
	"coxswain.dev/coxswain/internal/provision"
	"coxswain.dev/coxswain/internal/readiness"
	"coxswain.dev/coxswain/internal/rebuild"
	"coxswain.dev/coxswain/internal/scopeauth"
	"coxswain.dev/coxswain/internal/settings"
	"coxswain.dev/coxswain/internal/status"
)

type options struct {
	namespace      string
	configName     string
	metrics        metricsFlags
	probeAddr      string
	pprofAddr      string
	leaderElection bool
	controllerSA   string
	settings       *settings.Flags
	limits         *discoveryserver.Limits
	zap            zap.Options
	tracing        tracingFlags
	version        bool
}

// tracingFlags are the shared --tracing-* flags, for the operator's rebuild spans.
type tracingFlags struct{ tracing.Flags }

func (t *tracingFlags) newTracer() (*tracing.Tracer, error) {
	opts, on, err := t.Options(tracing.ServiceController)
	if !on || err != nil {
		return nil, err
	}
	attrs := []attribute.KeyValue{}
	if pod := os.Getenv("POD_NAME"); pod != "" {
		attrs = append(attrs, attribute.String("k8s.pod.name", pod), attribute.String("service.instance.id", pod))
	}
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		attrs = append(attrs, attribute.String("k8s.namespace.name", ns))
	}
	opts.Attributes = attrs
	tr, err := tracing.New(opts)
	if err != nil {
		return nil, fmt.Errorf("--tracing-*: %w", err)
	}
	return tr, nil
}

func main() {
	opts := parseFlags(flag.CommandLine, os.Args[1:])
	if opts.version {
		fmt.Println(buildinfo.String("coxswain"))
		return
	}
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
	o.metrics.register(fs)
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address of the health probe endpoint.")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "", "Address serving runtime profiles under /debug/pprof/; empty (the default) serves none.")
	fs.BoolVar(&o.leaderElection, "leader-elect", false, "Elect a leader; only the leader writes status and provisions proxies.")
	fs.StringVar(&o.controllerSA, "controller-service-account", wellknown.ControllerServiceAccount,
		"The operator's own ServiceAccount: its SPIFFE ID is in the discovery serving certificate.")
	o.settings = settings.RegisterFlags(fs, os.LookupEnv)
	o.limits = discoveryserver.RegisterLimitFlags(fs)
	o.tracing.Register(fs, "rebuild spans")
	o.zap.BindFlags(fs)
	fs.BoolVar(&o.version, "version", false, "Print the version and revision, and exit.")
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
	metricsOpts, err := o.metrics.options()
	if err != nil {
		return fmt.Errorf("metrics endpoint: %w", err)
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsOpts,
		HealthProbeBindAddress:  o.probeAddr,
		PprofBindAddress:        o.pprofAddr,
		LeaderElection:          o.leaderElection,
		LeaderElectionID:        "coxswain-controller",
		LeaderElectionNamespace: o.namespace,
		Cache:                   cacheOptions(o.namespace),
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	// Pending until the CoxswainConfig reconciler has read the CoxswainConfig: the discovery
	// listeners wait for it, or a proxy bootstrapping at startup would get an SVID of the
	// flags' lifetime rather than the configured one.
	store := settings.NewPendingStore(base)
	board := readiness.NewBoard(v1alpha1.ConditionCAReady, v1alpha1.ConditionDiscoveryServing, v1alpha1.ConditionTrustBundlePublished)
	elected := mgr.Elected()
	isLeader := func() bool { return isClosed(elected) }
	cfg := &controllers.CoxswainConfigReconciler{
		Client:   mgr.GetClient(),
		Key:      types.NamespacedName{Namespace: o.namespace, Name: o.configName},
		Base:     base,
		Store:    store,
		Board:    board,
		Recorder: mgr.GetEventRecorder("coxswain"),
		IsLeader: isLeader,
	}
	if err := cfg.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up CoxswainConfig controller: %w", err)
	}
	tracer, err := o.tracing.newTracer()
	if err != nil {
		return err
	}
	if tracer != nil {
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = tracer.Shutdown(ctx)
		}()
	}
	if err := setupGatewayAPI(mgr, o, store, board, isLeader, elected, tracer); err != nil {
		return err
	}
	if err := errors.Join(mgr.AddHealthzCheck("healthz", healthz.Ping), mgr.AddReadyzCheck("discovery", discoveryServing(board))); err != nil {
		return fmt.Errorf("add health checks: %w", err)
	}
	ctrl.Log.Info("Starting operator", "namespace", o.namespace, "config", o.configName)
	return mgr.Start(ctrl.SetupSignalHandler())
}

// cacheOptions restricts the informer cache: CoxswainConfig only in the operator's namespace,
// plus the Gateway API controller's restrictions (only TLS Secrets, one CRD).
func cacheOptions(namespace string) cache.Options {
	byObject := controllers.GatewayAPICacheOptions()
	maps.Copy(byObject, controllers.ProvisionCacheOptions())
	byObject[&v1alpha1.CoxswainConfig{}] = cache.ByObject{Namespaces: map[string]cache.Config{namespace: {}}}
	return cache.Options{ByObject: byObject}
}

// setupGatewayAPI wires the control channel: the discovery CA, trust bundle and listeners, and
// the translation pipeline whose snapshots the stream listener serves and whose scope authority
// decides which proxy may subscribe to which Gateway.
func setupGatewayAPI(mgr ctrl.Manager, o *options, store *settings.Store, board *readiness.Board, isLeader func() bool, elected <-chan struct{}, tracer *tracing.Tracer) error {
	snapshots := snapcache.New(nil)
	authority := scopeauth.New(
		scopeauth.ServiceAccount{Namespace: o.namespace, Name: wellknown.SharedProxyServiceAccount},
		scopeauth.ServiceAccount{Namespace: o.namespace, Name: o.controllerSA},
	)
	// A Gateway's scope and SVID go only to the ServiceAccount the provisioner created for it.
	authority.RequireOwnership(scopeauth.CachedOwnership(mgr.GetCache()))
	pipeline, err := newPipeline(mgr, o, store, snapshots, authority, isLeader)
	if err != nil {
		return err
	}
	var rebuildTracer trace.Tracer
	var onConverged func(snapcache.Scope, *snapcache.Snapshot, time.Time)
	if tracer != nil {
		rebuildTracer = tracer.Tracer()
		onConverged = rebuild.TraceConvergence(rebuildTracer)
	}
	disc, err := discoveryserver.Setup(mgr, discoveryserver.SetupOptions{
		Namespace:      o.namespace,
		PodName:        os.Getenv("POD_NAME"),
		ConfigName:     o.configName,
		ServiceAccount: o.controllerSA,
		Settings:       store,
		Board:          board,
		Snapshots:      snapshots,
		Scopes:         authority,
		OnAnswer:       pipeline.Answered,
		OnConverged:    onConverged,
		Limits:         *o.limits,
	})
	if err != nil {
		return fmt.Errorf("set up discovery: %w", err)
	}
	authority.OnDedicatedIdentities(func(set []scopeauth.ServiceAccount) {
		ids := make([]identity.ServiceAccount, 0, len(set))
		for _, sa := range set {
			ids = append(ids, identity.ServiceAccount{Namespace: sa.Namespace, Name: sa.Name})
		}
		disc.Allowlist.Replace(ids)
	})
	authority.OnChange(disc.Runner.Reauthorize)
	pipeline.TrustCopies, pipeline.Proxies = disc.TrustCopies, disc.Runner.Proxies
	provisionMetrics, err := controllers.NewProvisionMetrics(crmetrics.Registry)
	if err != nil {
		return err
	}
	gw := &controllers.GatewayAPIReconciler{
		Client:          mgr.GetClient(),
		Cache:           mgr.GetCache(),
		Pipeline:        pipeline,
		Debouncer:       rebuild.NewDebouncer(rebuild.DefaultInterval, nil),
		Elected:         elected,
		SettingsChanged: store.Subscribe(),
		Tracer:          rebuildTracer,
	}
	if err := gw.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up Gateway API controller: %w", err)
	}
	prov := &controllers.ProvisionReconciler{
		Client:          mgr.GetClient(),
		Cache:           mgr.GetCache(),
		Reader:          mgr.GetAPIReader(),
		Graph:           graph.Options{Namespace: o.namespace},
		Defaults:        func() provision.Defaults { return proxyDefaults(o, store.Get()) },
		DefaultsChanged: store.Subscribe(),
		Recorder:        mgr.GetEventRecorder("coxswain"),
		Metrics:         provisionMetrics,
		SharedPoolLimits: func() (int32, int32) {
			s := store.Get()
			return s.MaxSharedGatewaysPerNamespace, s.MaxSharedPortsPerNamespace
		},
		ListenerLimits: func() graph.ListenerLimits { return listenerLimits(store.Get()) },
	}
	if err := prov.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up provisioning controller: %w", err)
	}
	return nil
}

// newPipeline builds the translation pipeline and its status writer, which judges a Gateway
// Programmed once its proxies applied its generation: the discovery server, built after it,
// tells it every proxy's answer (its Proxies and TrustCopies are set once that exists).
func newPipeline(mgr ctrl.Manager, o *options, store *settings.Store, snapshots *snapcache.Cache, authority *scopeauth.Authority, isLeader func() bool) (*rebuild.Pipeline, error) {
	metrics, err := rebuild.NewMetrics(crmetrics.Registry)
	if err != nil {
		return nil, err
	}
	pipeline := &rebuild.Pipeline{
		Graph:     graph.Options{Namespace: o.namespace},
		Cache:     snapshots,
		Authority: authority,
		IsLeader:  isLeader,
		Metrics:   metrics,
		SharedPoolLimits: func() (int32, int32) {
			s := store.Get()
			return s.MaxSharedGatewaysPerNamespace, s.MaxSharedPortsPerNamespace
		},
		ListenerLimits:            func() graph.ListenerLimits { return listenerLimits(store.Get()) },
		MaxRouteBytesPerNamespace: func() int64 { return store.Get().MaxRouteBytesPerNamespace },
		TrustAnyEndpointSlice: func() bool {
			return store.Get().EndpointSlices == v1alpha1.EndpointSliceTrustAny
		},
	}
	pipeline.Status = &status.Writer{
		Client: mgr.GetClient(), Reader: mgr.GetAPIReader(),
		LegacyFieldManager:    status.ProcessFieldManager(),
		Namespace:             o.namespace,
		Recorder:              mgr.GetEventRecorder("coxswain"),
		SharedProxyDeployment: types.NamespacedName{Namespace: o.namespace, Name: wellknown.SharedProxyServiceAccount},
		Applied:               pipeline.Applied,
	}
	return pipeline, nil
}

// proxyDefaults are what a dedicated proxy gets when its parameters say nothing, and where it
// finds the controller: the discovery Service of the operator's namespace.
func proxyDefaults(o *options, s settings.Settings) provision.Defaults {
	host := wellknown.DiscoveryServiceName + "." + o.namespace + ".svc"
	return provision.Defaults{
		Image:                    s.ProxyImage,
		Replicas:                 s.ProxyReplicas,
		Resources:                s.ProxyResources,
		ServiceType:              s.ProxyServiceType,
		HTTP1Engine:              s.ProxyHTTP1Engine,
		AccessLog:                s.ProxyAccessLog,
		Tracing:                  s.ProxyTracing,
		DiscoveryEndpoint:        net.JoinHostPort(host, strconv.Itoa(wellknown.StreamPort)),
		BootstrapEndpoint:        net.JoinHostPort(host, strconv.Itoa(wellknown.BootstrapPort)),
		ControllerNamespace:      o.namespace,
		ControllerServiceAccount: o.controllerSA,
		AllowedImages:            s.AllowedProxyImages,
		AllowedTracingEndpoints:  s.AllowedTracingEndpoints,
		SharedLabelPrefixes:      s.SharedServiceLabelPrefixes,
		SharedAnnotationPrefixes: s.SharedServiceAnnotationPrefixes,
	}
}

// discoveryServing makes a replica ready only while its discovery listeners serve, so the
// discovery Service never sends a proxy to a replica that cannot answer it (in External mode
// without a usable CA, no replica is ready: the operator fails closed).
func discoveryServing(board *readiness.Board) healthz.Checker {
	return func(*http.Request) error {
		for _, c := range board.Conditions() {
			if c.Type == v1alpha1.ConditionDiscoveryServing && c.Status != metav1.ConditionTrue {
				return fmt.Errorf("discovery is not serving: %s: %s", c.Reason, c.Message)
			}
		}
		return nil
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// listenerLimits are the graph's caps of ListenerSets in s.
func listenerLimits(s settings.Settings) graph.ListenerLimits {
	return graph.ListenerLimits{
		MaxListenersPerPort: s.MaxListenersPerPort, MaxListenerSetsPerGateway: s.MaxListenerSetsPerGateway,
		MaxListenerSetsPerNamespace: s.MaxListenerSetsPerNamespace,
	}
}
