package stream

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc/health"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/internal/connlimit"
	"coxswain.dev/coxswain/discovery/server/internal/quiet"
	"coxswain.dev/coxswain/discovery/tlsconfig"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// Defaults of the stream listener's limits.
const (
	// DefaultSubscribeTimeout is how long a new stream may take to send its Subscribe.
	DefaultSubscribeTimeout = 10 * time.Second
	// DefaultMaxStreamsPerIdentity is how many live streams one SPIFFE ID may hold: the replicas
	// of its proxy Deployment plus the surge of a rollout.
	DefaultMaxStreamsPerIdentity = wellknown.DefaultMaxStreamsPerIdentity
	// DefaultMaxStreams is how many streams the listener holds at once, whoever opened them.
	DefaultMaxStreams = 4096
	// DefaultAckTimeout is how long a snapshot may wait for its ACK or NACK before its stream is
	// closed: a proxy that does not read holds a snapshot in controller memory.
	DefaultAckTimeout = time.Minute
	// DefaultHandshakeTimeout bounds a connection's TLS handshake.
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultMaxConnectionIdle closes a connection that has had no stream for that long.
	DefaultMaxConnectionIdle = 2 * time.Minute
)

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
	// MaxStreamsPerIdentity caps the live streams of one SPIFFE ID (a new stream of a node it
	// already holds replaces that one and does not count); DefaultMaxStreamsPerIdentity when zero.
	MaxStreamsPerIdentity int
	// MaxStreams caps the streams of the listener; DefaultMaxStreams when zero.
	MaxStreams int
	// MaxConnections caps the connections of the listener Listener wraps;
	// DefaultMaxConnections when zero.
	MaxConnections int
	// MaxConnectionsPerSource caps those of one source address;
	// DefaultMaxConnectionsPerSource when zero.
	MaxConnectionsPerSource int
	// BusyHandshakeTimeout bounds the handshake of connections accepted above half of
	// MaxConnections; DefaultBusyHandshakeTimeout when zero.
	BusyHandshakeTimeout time.Duration
	// MaxInFlightBytesPerIdentity caps the bytes of snapshots sent and not yet answered on the
	// streams of one SPIFFE ID, a version sent on several counted once;
	// DefaultMaxInFlightBytesPerIdentity when zero.
	MaxInFlightBytesPerIdentity int
	// AckTimeout bounds the wait for the answer to a snapshot; DefaultAckTimeout when zero.
	AckTimeout time.Duration
	// MaxInlineBytes bounds the snapshots whose inline layout the server makes for a stream
	// that subscribed without route_sets (a proxy that predates RouteSets): such a stream of a
	// scope whose snapshot encodes to more is closed (InlineTooLarge) before any layout is
	// built. cache.DefaultMaxInlineBytes when zero.
	MaxInlineBytes int
	// MaxSessionLifetime caps how long one stream lives, even with certificates that live longer
	// (an External CA may issue them); wellknown.MaxSVIDTTL when zero. The operator passes the
	// SVID TTL in force.
	MaxSessionLifetime time.Duration
	// HandshakeTimeout and MaxConnectionIdle configure the gRPC server NewGRPCServer builds;
	// DefaultHandshakeTimeout and DefaultMaxConnectionIdle when zero.
	HandshakeTimeout  time.Duration
	MaxConnectionIdle time.Duration
	// OnAnswer, when set, is called with a scope whenever what Proxies returns for it may have
	// changed: after an ACK or NACK, and when a stream of the scope opens or closes. It runs on
	// the stream's goroutine and must not block (signal a channel that coalesces, for example):
	// a stream never waits for its consumer.
	OnAnswer func(scope cache.Scope)
	// OnConverged, when set, is called with each version that every live stream of its scope
	// acknowledged, and when the last of them did (what coxswain_discovery_convergence_seconds
	// observes). It runs on the goroutine of the stream whose acknowledgement or departure
	// completed it, under the convergence lock, and must not block.
	OnConverged func(scope cache.Scope, snap *cache.Snapshot, lastAck time.Time)
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
	limits           limits
	// streams counts the handlers running, for MaxStreams.
	streams atomic.Int64
	peers   peerVerifier
	log     logr.Logger
	now     func() time.Time
	metrics *metrics
	// converge times versions to the acknowledgement of their scope's last live stream.
	converge *convergence
	health   *health.Server
	quiet    *quiet.Limiter
	// entropy makes the nonces unpredictable: crypto/rand.
	entropy io.Reader
	// inFlight holds each identity's unanswered snapshots to MaxInFlightBytesPerIdentity.
	inFlight *budget

	// listeners are the connection caps Listener made, where a stuck stream's connection is found.
	listeners connlimit.Set
	// onAnswer is Config.OnAnswer.
	onAnswer func(cache.Scope)

	mu          sync.Mutex
	sessions    map[sessionKey]*session
	perIdentity map[string]int
	scopeCounts map[cache.Scope]int
	// byScope holds the live sessions of each scope, for Proxies.
	byScope map[cache.Scope]map[*session]struct{}
	closed  bool
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
	lim := limits{
		perIdentity:          orDefault(cfg.MaxStreamsPerIdentity, DefaultMaxStreamsPerIdentity),
		streams:              orDefault(cfg.MaxStreams, DefaultMaxStreams),
		connections:          orDefault(cfg.MaxConnections, DefaultMaxConnections),
		perSource:            orDefault(cfg.MaxConnectionsPerSource, DefaultMaxConnectionsPerSource),
		busyHandshakeTimeout: orDefault(cfg.BusyHandshakeTimeout, DefaultBusyHandshakeTimeout),
		ackTimeout:           orDefault(cfg.AckTimeout, DefaultAckTimeout),
		maxInlineBytes:       orDefault(cfg.MaxInlineBytes, cache.DefaultMaxInlineBytes),
		handshakeTimeout:     orDefault(cfg.HandshakeTimeout, DefaultHandshakeTimeout),
		maxConnectionIdle:    orDefault(cfg.MaxConnectionIdle, DefaultMaxConnectionIdle),
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m, err := newMetrics(cfg.Registerer, cfg.Cache)
	if err != nil {
		return nil, err
	}
	observe := m.observeConvergence
	if hook := cfg.OnConverged; hook != nil {
		observe = func(scope cache.Scope, snap *cache.Snapshot, lastAck time.Time) {
			m.observeConvergence(scope, snap, lastAck)
			hook(scope, snap, lastAck)
		}
	}
	converge := newConvergence(observe)
	return &Server{
		cache: cfg.Cache, scopes: cfg.Scopes, installNamespace: cfg.InstallNamespace,
		subscribeTimeout: cfg.SubscribeTimeout, limits: lim, log: cfg.Logger, now: cfg.Now, metrics: m, converge: converge, health: newHealth(),
		quiet: quiet.New(quiet.DefaultBurst, quiet.DefaultInterval), entropy: rand.Reader,
		inFlight: newBudget(orDefault(cfg.MaxInFlightBytesPerIdentity, DefaultMaxInFlightBytesPerIdentity)),
		onAnswer: cfg.OnAnswer,
		peers: peerVerifier{
			td: cfg.TrustDomain, bundles: cfg.Bundles, now: cfg.Now,
			maxLifetime: orDefault(cfg.MaxSessionLifetime, wellknown.MaxSVIDTTL),
		},
		sessions: make(map[sessionKey]*session), perIdentity: make(map[string]int), scopeCounts: make(map[cache.Scope]int),
		byScope: make(map[cache.Scope]map[*session]struct{}),
	}, nil
}

// limits are the resource caps of the listener.
type limits struct {
	perIdentity          int
	streams              int
	connections          int
	perSource            int
	busyHandshakeTimeout time.Duration
	ackTimeout           time.Duration
	maxInlineBytes       int
	handshakeTimeout     time.Duration
	maxConnectionIdle    time.Duration
}

func orDefault[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
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
	s.answered(sess.scope)
	if sess.conn != nil {
		// Only a subscribed stream is use of the connection (see Listener).
		defer sess.conn.Busy()()
	}
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

// refuse counts a stream the server refused, logs it unless its (reason, identity) was logged
// too often lately, and returns its status.
func (s *Server) refuse(ctx context.Context, err error) error {
	reason, st := toStatus(err)
	if reason != "" {
		s.metrics.denied.WithLabelValues(string(reason)).Inc()
	}
	peerID := "none"
	if id, ok := identityFrom(ctx); ok {
		peerID = id.ID.String()
	}
	if ok, suppressed := s.quiet.Allow(string(reason)+" "+peerID, s.now()); ok {
		s.log.Info("Refused stream", "spiffeID", peerID, "reason", reason, "error", err.Error(), "suppressed", suppressed)
	}
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

// Reverify verifies the peer chain of every live stream again against the current trust bundle
// and closes with UNAUTHENTICATED those that no longer verify: call it whenever the bundle
// changes, so that a root removed from the bundle (a compromised CA distrusted) cuts its
// streams at once instead of at their certificates' expiry. It returns the number closed.
func (s *Server) Reverify() int {
	closed := 0
	for _, sess := range s.live() {
		if err := s.peers.verify(sess.id.chain); err != nil {
			sess.cancel(deny(ReasonCertificateUntrusted, "peer certificate no longer verifies: %v", err))
			closed++
		}
	}
	return closed
}

// Shutdown closes every live stream with UNAVAILABLE, so that proxies reconnect elsewhere, and
// refuses new ones. Call it before stopping the gRPC server.
func (s *Server) Shutdown() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.health.Shutdown()
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
