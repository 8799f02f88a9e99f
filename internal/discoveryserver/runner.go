package discoveryserver

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/server/bootstrap"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/stream"
	"coxswain.dev/coxswain/discovery/tlsconfig"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/readiness"
	"coxswain.dev/coxswain/internal/settings"
)

// Reasons of the DiscoveryServing condition.
const (
	ReasonServing       = "Serving"
	ReasonCAUnavailable = "CAUnavailable"
	ReasonListenFailed  = "ListenFailed"
	ReasonStopped       = "Stopped"
	// ReasonSettingsPending: the operator's CoxswainConfig has not been read yet; nothing
	// listens, so no SVID is issued under a lifetime about to change.
	ReasonSettingsPending = "SettingsPending"
)

const (
	// DefaultShutdownGrace is how long in-flight RPCs may finish when listeners stop.
	DefaultShutdownGrace = 10 * time.Second
	// retryListen is how soon a failed start is retried.
	retryListen = 5 * time.Second
)

// CA is what the listeners need of the CA store.
type CA interface {
	bootstrap.CASource
	tlsconfig.BundleSource
	Subscribe() <-chan struct{}
}

// Options configures a Runner. Settings, CA, Authenticator, Allowlist, Board and Namespace are
// required. Snapshots and Scopes enable the stream listener; without them only bootstrap serves.
type Options struct {
	Settings      *settings.Store
	CA            CA
	Authenticator bootstrap.Authenticator
	Allowlist     bootstrap.Allowlist
	Reporter      bootstrap.Reporter
	Board         *readiness.Board
	// Namespace is the controller namespace; ServiceAccount is the controller's, whose SPIFFE ID
	// the serving certificate carries (wellknown.ControllerServiceAccount when empty).
	Namespace      string
	ServiceAccount string
	// Snapshots and Scopes feed the stream listener (discovery/server/stream).
	Snapshots *cache.Cache
	Scopes    stream.ScopeAuthority
	// OnAnswer, when set, is the stream listener's stream.Config.OnAnswer: it hears, and must
	// not block, whenever what Proxies returns for a scope may have changed.
	OnAnswer func(cache.Scope)
	// OnConverged, when set, is the stream listener's stream.Config.OnConverged: it hears each
	// version every live stream of its scope acknowledged.
	OnConverged func(scope cache.Scope, snap *cache.Snapshot, lastAck time.Time)
	// Host is the address to listen on, all interfaces when empty.
	Host string
	// Limits are the listeners' connection and memory limits; zero fields take their defaults.
	Limits Limits
	// Registerer receives the listeners' metrics; nil leaves them unregistered.
	Registerer    prometheus.Registerer
	Logger        logr.Logger
	ShutdownGrace time.Duration
	// ServingTTL is the serving certificate's lifetime, servingcert.DefaultTTL when zero.
	ServingTTL time.Duration
}

// Runner is a manager.Runnable serving discovery on every replica.
type Runner struct {
	opts  Options
	log   logr.Logger
	addrs chan Addrs
	// stream is the stream server of the running generation, nil while none serves.
	stream atomic.Pointer[stream.Server]
}

// New checks opts and returns a Runner.
func New(opts Options) (*Runner, error) {
	if opts.Settings == nil || opts.CA == nil || opts.Authenticator == nil || opts.Allowlist == nil ||
		opts.Board == nil || opts.Namespace == "" {
		return nil, errors.New("discoveryserver: settings, CA, authenticator, allowlist, board and namespace are required")
	}
	if (opts.Snapshots == nil) != (opts.Scopes == nil) {
		return nil, errors.New("discoveryserver: the stream listener needs both a snapshot cache and a scope authority")
	}
	if opts.ServiceAccount == "" {
		opts.ServiceAccount = wellknown.ControllerServiceAccount
	}
	if opts.ShutdownGrace == 0 {
		opts.ShutdownGrace = DefaultShutdownGrace
	}
	if opts.Registerer != nil {
		opts.Registerer = replacingRegisterer{opts.Registerer}
	}
	return &Runner{opts: opts, log: opts.Logger, addrs: make(chan Addrs, 1)}, nil
}

// NeedLeaderElection is false: every replica serves its proxies.
func (r *Runner) NeedLeaderElection() bool { return false }

// Addrs are the addresses the listeners bound; empty when one is off.
type Addrs struct {
	Bootstrap string
	Stream    string
}

// Listening receives the addresses after each (re)start of the listeners, and empty Addrs after
// they stop for want of a CA; the latest value waits when nobody reads.
func (r *Runner) Listening() <-chan Addrs { return r.addrs }

// Start serves until ctx ends, then stops the listeners gracefully.
func (r *Runner) Start(ctx context.Context) error {
	settingsChanged, caChanged := r.opts.Settings.Subscribe(), r.opts.CA.Subscribe()
	var gen *generation
	defer func() {
		gen.stop()
		r.report(metav1.ConditionFalse, ReasonStopped, "The controller is shutting down")
	}()
	select {
	case <-r.opts.Settings.Loaded():
	default:
		r.report(metav1.ConditionFalse, ReasonSettingsPending, "Waiting for the CoxswainConfig to be read before listening")
		select {
		case <-ctx.Done():
			return nil
		case <-r.opts.Settings.Loaded():
		}
	}
	for {
		var retry <-chan time.Time
		var err error
		gen, err = r.reconcile(ctx, gen)
		r.stream.Store(gen.streamServer())
		if s := gen.streamServer(); s != nil {
			// The bundle may have lost a root: streams of its certificates end now.
			s.Reverify()
		}
		if err != nil {
			r.log.Error(err, "Failed to start discovery listeners")
			r.report(metav1.ConditionFalse, ReasonListenFailed, err.Error())
			retry = time.After(retryListen)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-settingsChanged:
		case <-caChanged:
		case <-gen.failedChan():
		case <-retry:
		}
	}
}

// Proxies returns what every live stream of scope on this replica last answered (see
// stream.Server.Proxies); none while no stream listener serves. Streams of other replicas are
// not known here.
func (r *Runner) Proxies(scope cache.Scope) []stream.ProxyState {
	if s := r.stream.Load(); s != nil {
		return s.Proxies(scope)
	}
	return nil
}

// Reauthorize re-checks every live stream against the scope authority and closes the ones it
// now denies. Call it whenever the facts behind an authorization change.
func (r *Runner) Reauthorize() {
	if s := r.stream.Load(); s != nil {
		s.Reauthorize()
	}
}

// reconcile makes the running generation match the settings and the CA: none without a usable
// CA, a new one when the listener settings changed or the running one failed.
func (r *Runner) reconcile(ctx context.Context, gen *generation) (*generation, error) {
	if _, _, err := r.opts.CA.Current(); err != nil {
		if gen != nil {
			r.log.Info("Stopping discovery listeners, no usable CA", "reason", err.Error())
			gen.stop()
			r.publish(Addrs{})
		}
		r.report(metav1.ConditionFalse, ReasonCAUnavailable, "No usable discovery CA: "+err.Error())
		return nil, nil
	}
	cfg := configOf(r.opts.Settings.Get())
	if gen != nil && gen.cfg == cfg && !gen.hasFailed() {
		return gen, nil
	}
	if gen != nil {
		gen.stop()
	}
	next, err := r.start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	r.publish(next.addrs)
	r.report(metav1.ConditionTrue, ReasonServing, next.describe())
	return next, nil
}

func (r *Runner) report(status metav1.ConditionStatus, reason, msg string) {
	r.opts.Board.Report(v1alpha1.ConditionDiscoveryServing, status, reason, msg)
}

func (r *Runner) publish(a Addrs) {
	select {
	case <-r.addrs:
	default:
	}
	r.addrs <- a
}

// listenConfig is what a generation of listeners depends on; a change restarts them.
type listenConfig struct {
	trustDomain   string
	svidTTL       time.Duration
	bootstrapPort int32
	streamPort    int32
	maxStreams    int32
}

func configOf(s settings.Settings) listenConfig {
	return listenConfig{
		trustDomain: s.TrustDomain, svidTTL: s.SVIDTTL, bootstrapPort: s.BootstrapPort, streamPort: s.Port,
		maxStreams: s.MaxStreamsPerIdentity,
	}
}

// replacingRegisterer lets each generation register its collectors in place of the previous
// generation's, which stopped.
type replacingRegisterer struct{ prometheus.Registerer }

func (r replacingRegisterer) Register(c prometheus.Collector) error {
	err := r.Registerer.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		r.Unregister(are.ExistingCollector)
		err = r.Registerer.Register(c)
	}
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	return nil
}

func (r replacingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}
