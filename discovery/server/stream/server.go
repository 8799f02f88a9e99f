package stream

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/tlsconfig"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// DefaultSubscribeTimeout is how long a new stream may take to send its Subscribe.
const DefaultSubscribeTimeout = 10 * time.Second

// Config configures a Server. TrustDomain, Bundles, Cache and Scopes are required.
type Config struct {
	TrustDomain spiffeid.TrustDomain
	// Bundles is the trust bundle the peer chain is verified against, the one the listener's
	// TLS config uses.
	Bundles tlsconfig.BundleSource
	Cache   *cache.Cache
	Scopes  ScopeAuthority
	// InstallNamespace holds the shared proxy ServiceAccount; wellknown.InstallNamespace when empty.
	InstallNamespace string
	// SubscribeTimeout bounds the wait for the first message; DefaultSubscribeTimeout when zero.
	SubscribeTimeout time.Duration
	// Registerer receives the metrics; nil leaves them unregistered.
	Registerer prometheus.Registerer
	Logger     logr.Logger
	// Now is the clock, time.Now when nil.
	Now func() time.Time
}

// Server implements the Stream method of the Discovery service. Serve it only behind its
// interceptors (see UnaryInterceptor and StreamInterceptor).
type Server struct {
	discoveryv1.UnimplementedDiscoveryServer

	cache            *cache.Cache
	scopes           ScopeAuthority
	installNamespace string
	subscribeTimeout time.Duration
	peers            peerVerifier
	log              logr.Logger
	now              func() time.Time
	metrics          *metrics

	mu          sync.Mutex
	sessions    map[sessionKey]*session
	scopeCounts map[cache.Scope]int
	closed      bool
}

// New checks cfg, fills in defaults and registers the metrics.
func New(cfg Config) (*Server, error) {
	if cfg.TrustDomain.IsZero() || cfg.Bundles == nil || cfg.Cache == nil || cfg.Scopes == nil {
		return nil, errors.New("stream: trust domain, bundles, cache and scope authority are required")
	}
	if cfg.InstallNamespace == "" {
		cfg.InstallNamespace = wellknown.InstallNamespace
	}
	if cfg.SubscribeTimeout <= 0 {
		cfg.SubscribeTimeout = DefaultSubscribeTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Server{
		cache: cfg.Cache, scopes: cfg.Scopes, installNamespace: cfg.InstallNamespace,
		subscribeTimeout: cfg.SubscribeTimeout, log: cfg.Logger, now: cfg.Now, metrics: m,
		peers:    peerVerifier{td: cfg.TrustDomain, bundles: cfg.Bundles, now: cfg.Now},
		sessions: make(map[sessionKey]*session), scopeCounts: make(map[cache.Scope]int),
	}, nil
}

// Stream serves one subscription: it waits for Subscribe, authorizes the scope for the peer,
// registers the node and pushes snapshots until the client leaves or the server closes it.
func (s *Server) Stream(stream discoveryv1.Discovery_StreamServer) error {
	ctx := stream.Context()
	id, ok := identityFrom(ctx)
	if !ok {
		return s.refuse(ctx, deny(ReasonNoPeerIdentity, "no verified peer identity"))
	}
	recv := receive(stream)
	sub, err := s.awaitSubscribe(ctx, recv)
	if err != nil {
		return s.refuse(ctx, err)
	}
	sess, err := s.open(ctx, id, sub, stream, recv)
	if err != nil {
		return s.refuse(ctx, err)
	}
	defer s.close(sess)
	s.log.Info("Proxy subscribed", "nodeID", sess.nodeID, "spiffeID", id.ID.String(), "scope", sess.scope.String())
	cause := sess.run()
	reason, err := toStatus(cause)
	s.log.Info("Proxy stream closed", "nodeID", sess.nodeID, "scope", sess.scope.String(), "reason", reason, "error", errString(cause))
	if reason != "" {
		s.metrics.denied.WithLabelValues(string(reason)).Inc()
	}
	return err
}

// awaitSubscribe returns the first message, which must be a valid Subscribe sent in time.
func (s *Server) awaitSubscribe(ctx context.Context, recv <-chan received) (*discoveryv1.Subscribe, error) {
	timer := time.NewTimer(s.subscribeTimeout)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-timer.C:
		return nil, deny(ReasonSubscribeTimeout, "no Subscribe within %s", s.subscribeTimeout)
	case r := <-recv:
		if r.err != nil {
			return nil, r.err
		}
		sub := r.msg.GetSubscribe()
		if sub == nil {
			return nil, deny(ReasonNoSubscribe, "the first message must be Subscribe")
		}
		if v := sub.GetWireVersion(); v != discoveryv1.WireVersion {
			return nil, deny(ReasonWireVersion, "wire version %d, server speaks %d", v, discoveryv1.WireVersion)
		}
		return sub, nil
	}
}

// refuse counts and logs a stream the server refused and returns its status.
func (s *Server) refuse(ctx context.Context, err error) error {
	reason, st := toStatus(err)
	if reason != "" {
		s.metrics.denied.WithLabelValues(string(reason)).Inc()
	}
	peerID := "none"
	if id, ok := identityFrom(ctx); ok {
		peerID = id.ID.String()
	}
	s.log.Info("Refused stream", "spiffeID", peerID, "reason", reason, "error", err.Error())
	return st
}

// authorize allows the shared pool only to the shared proxy ServiceAccount of the install
// namespace, and a Gateway only to the ServiceAccount the ScopeAuthority expects for it, in the
// Gateway's namespace.
func (s *Server) authorize(id Identity, scope cache.Scope) error {
	switch scope.Kind {
	case cache.KindSharedPool:
		if id.Namespace == s.installNamespace && id.ServiceAccount == wellknown.SharedProxyServiceAccount {
			return nil
		}
		return deny(ReasonScopeNotAuthorized, "%s may not subscribe to the shared pool", id.ID)
	case cache.KindGateway:
		return s.authorizeGateway(id, scope)
	default:
		return deny(ReasonInvalidSubscribe, "invalid scope")
	}
}

func (s *Server) authorizeGateway(id Identity, scope cache.Scope) error {
	sa, err := s.scopes.ExpectedServiceAccount(scope.Namespace, scope.Name)
	switch {
	case errors.Is(err, ErrUnknownGateway):
		return deny(ReasonScopeNotAuthorized, "%s may not subscribe to %s: %v", id.ID, scope, err)
	case err != nil:
		return deny(ReasonScopeUnknown, "authorize %s: %v", scope, err)
	case id.Namespace != scope.Namespace || id.ServiceAccount != sa:
		return deny(ReasonScopeNotAuthorized, "%s may not subscribe to %s", id.ID, scope)
	}
	return nil
}

// Reauthorize checks every live stream against the current ScopeAuthority and closes with
// PERMISSION_DENIED those no longer allowed: call it whenever the facts behind an authorization
// change (a Gateway deleted, its class or expected ServiceAccount changed). A stream whose
// answer is not known now is kept. It returns the number of streams closed.
func (s *Server) Reauthorize() int {
	revoked := 0
	for _, sess := range s.live() {
		err := s.authorize(sess.id, sess.scope)
		var d *denial
		if err == nil || !errors.As(err, &d) || d.reason != ReasonScopeNotAuthorized {
			continue
		}
		sess.cancel(deny(ReasonRevoked, "authorization revoked: %s", d.msg))
		revoked++
	}
	return revoked
}

// Shutdown closes every live stream with UNAVAILABLE, so that proxies reconnect elsewhere, and
// refuses new ones. Call it before stopping the gRPC server.
func (s *Server) Shutdown() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	for _, sess := range s.live() {
		sess.cancel(deny(ReasonShutdown, "server shutting down"))
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (s *Server) live() []*session {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*session, 0, len(s.sessions))
	for _, sess := range s.sessions {
		out = append(out, sess)
	}
	return out
}
