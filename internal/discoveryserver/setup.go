package discoveryserver

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/stream"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/identity"
	"coxswain.dev/coxswain/internal/identity/castore"
	"coxswain.dev/coxswain/internal/identity/trustbundle"
	"coxswain.dev/coxswain/internal/readiness"
	"coxswain.dev/coxswain/internal/settings"
)

// SetupOptions is what Setup needs from main.
type SetupOptions struct {
	// Namespace is the controller namespace; PodName (the downward API's POD_NAME, may be empty)
	// and ConfigName name the object BootstrapRejected events are about.
	Namespace  string
	PodName    string
	ConfigName string
	// ServiceAccount is the controller's, wellknown.ControllerServiceAccount when empty.
	ServiceAccount string
	Settings       *settings.Store
	Board          *readiness.Board
	// Snapshots and Scopes enable the stream listener; nil leaves it off.
	Snapshots *cache.Cache
	Scopes    stream.ScopeAuthority
	// OnAnswer is Options.OnAnswer: it hears when a proxy answers a snapshot.
	OnAnswer func(cache.Scope)
	// OnConverged is Options.OnConverged: it hears when a version reached every proxy of its
	// scope.
	OnConverged func(scope cache.Scope, snap *cache.Snapshot, lastAck time.Time)
	// Host is the listen address, all interfaces when empty.
	Host string
	// Limits are the listeners' connection and memory limits (RegisterLimitFlags).
	Limits Limits
}

// Components are the pieces Setup wired, for the provisioner to feed.
type Components struct {
	CA *castore.Store
	// Allowlist takes the dedicated proxies' ServiceAccounts.
	Allowlist *identity.Allowlist
	// TrustCopies takes the namespaces that run a dedicated proxy.
	TrustCopies *trustbundle.Replicator
	Runner      *Runner
}

// Setup builds the discovery CA, the trust bundle publisher and copier, the bootstrap identity
// checks and the listeners, and adds the long-running ones to mgr.
func Setup(mgr manager.Manager, o SetupOptions) (*Components, error) {
	if o.Settings == nil || o.Board == nil || o.Namespace == "" {
		return nil, errors.New("discoveryserver: settings, board and namespace are required")
	}
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("discoveryserver: build clientset: %w", err)
	}
	log := mgr.GetLogger().WithName("discovery")
	recorder := mgr.GetEventRecorder("coxswain")
	ca, err := castore.New(castore.Options{
		Client: cs, Namespace: o.Namespace, Settings: o.Settings, Board: o.Board, Recorder: recorder,
		Publisher: trustbundle.NewPublisher(cs, o.Namespace, o.Board, log.WithName("trust")),
		Logger:    log.WithName("ca"),
	})
	if err != nil {
		return nil, err
	}
	c := &Components{
		CA:          ca,
		Allowlist:   identity.NewAllowlist(o.Namespace, identity.ServiceAccount{Namespace: o.Namespace, Name: controllerSA(o.ServiceAccount)}),
		TrustCopies: trustbundle.NewReplicator(cs, ca, log.WithName("trustcopies")),
	}
	auth := identity.NewAuthenticator(mgr.GetClient(), mgr.GetAPIReader(), log.WithName("tokenreview")).
		AllowUnbound(func() bool { return o.Settings.Get().AllowUnboundTokens })
	c.Runner, err = New(Options{
		Settings: o.Settings, CA: ca, Board: o.Board, Namespace: o.Namespace, ServiceAccount: o.ServiceAccount,
		Authenticator: auth,
		Allowlist:     c.Allowlist,
		Reporter:      identity.NewReporter(recorder, identity.ControllerReference(o.Namespace, o.PodName, o.ConfigName)),
		Snapshots:     o.Snapshots, Scopes: o.Scopes, OnAnswer: o.OnAnswer, OnConverged: o.OnConverged, Host: o.Host, Limits: o.Limits,
		Registerer: crmetrics.Registry, Logger: log,
	})
	if err != nil {
		return nil, err
	}
	if err := errors.Join(mgr.Add(ca), mgr.Add(c.TrustCopies), mgr.Add(c.Runner)); err != nil {
		return nil, fmt.Errorf("discoveryserver: add runnables: %w", err)
	}
	return c, nil
}

func controllerSA(sa string) string {
	if sa == "" {
		return wellknown.ControllerServiceAccount
	}
	return sa
}
