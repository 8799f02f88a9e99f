package castore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"

	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/discovery/server/bootstrap"
	"coxswain.dev/coxswain/discovery/tlsconfig"
	"coxswain.dev/coxswain/internal/identity/trustbundle"
	"coxswain.dev/coxswain/internal/readiness"
	"coxswain.dev/coxswain/internal/settings"
)

// +kubebuilder:rbac:groups="",namespace=coxswain-system,resources=secrets,verbs=get;list;watch;create;update

// DefaultCALifetime is the lifetime of a CA generated in Auto mode.
const DefaultCALifetime = 365 * 24 * time.Hour

// Options configures a Store. Client, Namespace, Settings, Board, Recorder and Publisher are
// required.
type Options struct {
	// Client reads and, in Auto mode, writes the CA Secret; it talks to the API server directly.
	Client    kubernetes.Interface
	Namespace string
	Settings  *settings.Store
	Board     *readiness.Board
	// Recorder records the events about the CA Secret.
	Recorder  events.EventRecorder
	Publisher *trustbundle.Publisher
	Logger    logr.Logger
	// Clock drives rotation; clock.RealClock when nil.
	Clock clock.Clock
	// CALifetime is the lifetime of generated CAs, DefaultCALifetime when zero.
	CALifetime time.Duration
	// Overlap is how long a successor CA is published before it signs; when zero, the longest
	// SVID lifetime in force while the signing root signed, which the CA Secret keeps across
	// restarts (annotation discovery.coxswain.dev/max-svid-ttl).
	Overlap time.Duration
}

// Store holds the discovery CA and its trust bundle. It implements bootstrap.CASource and
// tlsconfig.BundleSource, and runs as a manager.Runnable on every replica.
type Store struct {
	opts  Options
	log   logr.Logger
	clock clock.Clock
	poke  chan struct{}

	mu           sync.RWMutex
	signing      *pki.CA
	next         *pki.CA
	nextActiveAt time.Time
	retired      []pki.RetiredRoot
	loadErr      error
	bundle       *pki.Bundle
	maxTTL       time.Duration
	subs         []chan struct{}

	// lastReason is the CAReady reason last reported; only the Start goroutine uses it.
	lastReason string
}

var (
	_ bootstrap.CASource     = (*Store)(nil)
	_ tlsconfig.BundleSource = (*Store)(nil)
)

// New checks opts and returns a Store that holds no CA until Start loads one.
func New(opts Options) (*Store, error) {
	if opts.Client == nil || opts.Namespace == "" || opts.Settings == nil || opts.Board == nil ||
		opts.Recorder == nil || opts.Publisher == nil {
		return nil, errors.New("castore: client, namespace, settings, board, recorder and publisher are required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.CALifetime == 0 {
		opts.CALifetime = DefaultCALifetime
	}
	if opts.CALifetime < pki.MinCALifetime || opts.CALifetime > pki.MaxCALifetime {
		return nil, fmt.Errorf("castore: CA lifetime %s not in [%s, %s]", opts.CALifetime, pki.MinCALifetime, pki.MaxCALifetime)
	}
	return &Store{
		opts: opts, log: opts.Logger, clock: opts.Clock, poke: make(chan struct{}, 1),
		loadErr: ErrNotLoaded, maxTTL: opts.Settings.Get().SVIDTTL,
	}, nil
}

// Current returns the signing CA and the trust bundle, or why there is none.
func (s *Store) Current() (*pki.CA, *pki.Bundle, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.loadErr != nil {
		return nil, nil, s.loadErr
	}
	return s.signing, s.bundle, nil
}

// Bundle returns the trust bundle: the signing root, a successor about to sign, and every
// retired root whose leaves may still be live.
func (s *Store) Bundle() (*pki.Bundle, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.bundle == nil || s.bundle.Len() == 0 {
		return nil, tlsconfig.ErrNoBundle
	}
	return s.bundle, nil
}

// Subscribe returns a channel that receives a value after each change of the CA, the bundle or
// their availability. Notifications coalesce.
func (s *Store) Subscribe() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := make(chan struct{}, 1)
	s.subs = append(s.subs, c)
	return c
}

// NeedLeaderElection is false: every replica serves discovery and needs the CA.
func (s *Store) NeedLeaderElection() bool { return false }

// Start loads the CA and keeps it current until ctx ends, restarting when the CA mode, Secret
// name or trust domain changes.
func (s *Store) Start(ctx context.Context) error {
	changes := s.opts.Settings.Subscribe()
	for {
		cfg := s.sessionConfig()
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.runSession(sctx, cfg)
		}()
		stop := s.awaitChange(ctx, changes, cfg)
		cancel()
		<-done
		if stop {
			return nil
		}
		s.log.Info("Restarting CA store for new settings", "caMode", cfg.mode, "secret", cfg.secret)
	}
}

// awaitChange returns false when the session settings change and true when ctx ends. Other
// setting changes (the SVID lifetime) poke the running session.
func (s *Store) awaitChange(ctx context.Context, changes <-chan struct{}, cfg sessionConfig) bool {
	for {
		select {
		case <-ctx.Done():
			return true
		case <-changes:
			if s.sessionConfig() != cfg {
				return false
			}
			select {
			case s.poke <- struct{}{}:
			default:
			}
		}
	}
}

func (s *Store) notifyLocked() {
	for _, c := range s.subs {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}
