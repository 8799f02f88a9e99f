package bootstrap

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/internal/quiet"
	"coxswain.dev/coxswain/discovery/spiffe"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// Defaults of the bootstrap limiter.
const (
	DefaultMaxConcurrent = 8
	DefaultMaxQueued     = 64
	DefaultQueueWait     = 5 * time.Second
)

// Config configures a Service. TrustDomain, Authenticator, Allowlist and CA are required.
type Config struct {
	TrustDomain   spiffeid.TrustDomain
	Authenticator Authenticator
	Allowlist     Allowlist
	CA            CASource
	// Reporter is told about rejections; nil reports nothing.
	Reporter Reporter
	// Registerer receives the metrics; nil leaves them unregistered.
	Registerer prometheus.Registerer
	Logger     logr.Logger
	// SVIDTTL is the lifetime of issued SVIDs, wellknown.DefaultSVIDTTL when zero.
	SVIDTTL time.Duration
	// Now is the clock, time.Now when nil.
	Now func() time.Time
	// MaxConcurrent bootstraps run at once and MaxQueued more wait up to QueueWait for a slot.
	MaxConcurrent int
	MaxQueued     int
	QueueWait     time.Duration
	// MaxRenewalsConcurrent renewals (callers presenting a valid SVID of the ServiceAccount
	// their token claims) run at once in a lane of their own, with MaxQueued more waiting;
	// DefaultMaxConcurrent when zero.
	MaxRenewalsConcurrent int
	// MaxRenewalsPerIdentity bootstraps presenting the SVID of one SPIFFE ID may run or wait in
	// the renewal lane at once; more take the first-bootstrap lane. DefaultMaxRenewalsPerIdentity
	// when zero.
	MaxRenewalsPerIdentity int
	// RefusedIdentityTTL is how long a SPIFFE ID takes the first-bootstrap lane after a review
	// refused a token presented with its SVID; DefaultRefusedIdentityTTL when zero.
	RefusedIdentityTTL time.Duration
	// MaxPerSource bootstraps of one source address may run or wait at once;
	// DefaultMaxPerSource when zero.
	MaxPerSource int
	// RefusedTokenTTL is how long a token the review refused is refused again without a review;
	// DefaultRefusedTokenTTL when zero.
	RefusedTokenTTL time.Duration
}

// Service implements the Bootstrap method of the Discovery service. Stream is left
// unimplemented: the bootstrap listener does not serve it.
type Service struct {
	discoveryv1.UnimplementedDiscoveryServer

	td       spiffeid.TrustDomain
	ttl      time.Duration
	auth     Authenticator
	allow    Allowlist
	ca       CASource
	reporter Reporter
	log      logr.Logger
	now      func() time.Time
	limiter  *limiter
	renewals *limiter
	sources  *shares
	refused  *refusedSet
	// renewers counts the renewal lane's requests per SPIFFE ID; refusedIDs are the SPIFFE IDs
	// kept out of it.
	renewers   *shares
	refusedIDs *refusedSet
	quiet      *quiet.Limiter
	metrics    *metrics
}

// New checks cfg, fills in defaults and registers the metrics.
func New(cfg Config) (*Service, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Service{
		td: cfg.TrustDomain, ttl: cfg.SVIDTTL, auth: cfg.Authenticator, allow: cfg.Allowlist, ca: cfg.CA,
		reporter: cfg.Reporter, log: cfg.Logger, now: cfg.Now, metrics: m,
		limiter:    newLimiter(cfg.MaxConcurrent, cfg.MaxQueued, cfg.QueueWait),
		renewals:   newLimiter(cfg.MaxRenewalsConcurrent, cfg.MaxQueued, cfg.QueueWait),
		sources:    newShares(cfg.MaxPerSource),
		refused:    newRefusedSet(cfg.RefusedTokenTTL),
		renewers:   newShares(cfg.MaxRenewalsPerIdentity),
		refusedIDs: newRefusedSet(cfg.RefusedIdentityTTL),
		quiet:      quiet.New(quiet.DefaultBurst, quiet.DefaultInterval),
	}, nil
}

func (cfg *Config) defaults() error {
	if cfg.TrustDomain.IsZero() || cfg.Authenticator == nil || cfg.Allowlist == nil || cfg.CA == nil {
		return errors.New("bootstrap: trust domain, authenticator, allowlist and CA are required")
	}
	if cfg.SVIDTTL == 0 {
		cfg.SVIDTTL = wellknown.DefaultSVIDTTL
	}
	if cfg.SVIDTTL < wellknown.MinSVIDTTL || cfg.SVIDTTL > wellknown.MaxSVIDTTL {
		return fmt.Errorf("bootstrap: SVID TTL %s not in [%s, %s]", cfg.SVIDTTL, wellknown.MinSVIDTTL, wellknown.MaxSVIDTTL)
	}
	if cfg.Reporter == nil {
		cfg.Reporter = nopReporter{}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.MaxConcurrent = orDefault(cfg.MaxConcurrent, DefaultMaxConcurrent)
	cfg.MaxQueued = orDefault(cfg.MaxQueued, DefaultMaxQueued)
	cfg.QueueWait = orDefault(cfg.QueueWait, DefaultQueueWait)
	cfg.MaxRenewalsConcurrent = orDefault(cfg.MaxRenewalsConcurrent, DefaultMaxConcurrent)
	cfg.MaxPerSource = orDefault(cfg.MaxPerSource, DefaultMaxPerSource)
	cfg.RefusedTokenTTL = orDefault(cfg.RefusedTokenTTL, DefaultRefusedTokenTTL)
	cfg.MaxRenewalsPerIdentity = orDefault(cfg.MaxRenewalsPerIdentity, DefaultMaxRenewalsPerIdentity)
	cfg.RefusedIdentityTTL = orDefault(cfg.RefusedIdentityTTL, DefaultRefusedIdentityTTL)
	return nil
}

func orDefault[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// Bootstrap checks, in order, the wire version, the token's shape (before it costs anything),
// its admission (per-source bound, then a slot of the first-bootstrap or the renewal lane), the
// token's review, the allowlist and the CSR, then signs an SVID whose only name is the SPIFFE ID
// of the authenticated ServiceAccount. A review that refuses a token presented with an SVID keeps
// that SVID's SPIFFE ID out of the renewal lane for a while.
func (s *Service) Bootstrap(ctx context.Context, req *discoveryv1.BootstrapRequest) (*discoveryv1.BootstrapResponse, error) {
	principal, resp, err := s.bootstrap(ctx, req)
	if err != nil {
		return nil, s.rejected(ctx, principal, req, err)
	}
	s.metrics.issued()
	s.log.Info("Issued SVID", "principal", principal.String(), "pod", principal.PodName,
		"scope", scopeString(req.GetScope()), "notAfter", resp.GetNotAfter().AsTime())
	return resp, nil
}

func (s *Service) bootstrap(ctx context.Context, req *discoveryv1.BootstrapRequest) (Principal, *discoveryv1.BootstrapResponse, error) {
	if v := req.GetWireVersion(); v != discoveryv1.WireVersion {
		return Principal{}, nil, reject(ReasonWireVersion,
			fmt.Sprintf("wire version %d, server speaks %d", v, discoveryv1.WireVersion), nil)
	}
	if req.GetToken() == "" {
		return Principal{}, nil, reject(ReasonTokenMissing, "no token", nil)
	}
	token := req.GetToken()
	claimed, err := precheckToken(token, s.now())
	if err != nil {
		return Principal{}, nil, reject(ReasonTokenRejected, "token not accepted", err)
	}
	if s.refused.refused(token, s.now()) {
		return Principal{}, nil, reject(ReasonTokenRejected, "token not accepted", errRecentlyRefused)
	}
	presented := s.presentedID(ctx)
	release, err := s.admit(ctx, presented, s.claimedID(claimed))
	if err != nil {
		return Principal{}, nil, err
	}
	defer release()
	principal, err := s.authenticate(ctx, token)
	if err != nil {
		s.remember(err, token, presented)
		return principal, nil, err
	}
	id, err := s.authorize(principal)
	if err != nil {
		return principal, nil, err
	}
	resp, err := s.sign(req.GetCsr(), id)
	return principal, resp, err
}

// claimedID is the SPIFFE ID of the ServiceAccount a token claims, unverified; the zero ID when
// it has none.
func (s *Service) claimedID(sa serviceAccount) spiffeid.ID {
	id, err := spiffe.ServiceAccountID(s.td, sa.Namespace, sa.Name)
	if err != nil {
		return spiffeid.ID{}
	}
	return id
}

// admit takes the caller's share of its source address and a slot of its lane (see lane);
// release gives them back.
func (s *Service) admit(ctx context.Context, presented, claimed spiffeid.ID) (func(), error) {
	host := sourceHost(ctx)
	if !s.sources.take(host) {
		return nil, reject(ReasonOverloaded, "too many bootstraps in progress from this address", nil)
	}
	lane, give := s.lane(presented, claimed)
	release, err := lane.acquire(ctx)
	if err != nil {
		give()
		s.sources.give(host)
		return nil, err
	}
	return func() {
		release()
		give()
		s.sources.give(host)
	}, nil
}

// remember records a refusal by review: the token is refused without review for a while, and the
// SPIFFE ID of the SVID presented with it, if any, takes the first-bootstrap lane.
func (s *Service) remember(err error, token string, presented spiffeid.ID) {
	var rej *rejectError
	if !errors.As(err, &rej) || rej.reason != ReasonTokenRejected && rej.reason != ReasonPodMismatch {
		return
	}
	now := s.now()
	if rej.reason == ReasonTokenRejected {
		s.refused.add(token, now)
	}
	if !presented.IsZero() {
		s.refusedIDs.add(presented.String(), now)
	}
}

// authenticate reviews token. A refusal keeps the principal the Authenticator named, if any
// (a PodMismatch names the ServiceAccount whose pod is gone).
func (s *Service) authenticate(ctx context.Context, token string) (Principal, error) {
	p, err := s.auth.Authenticate(ctx, token)
	if err != nil {
		reason := authenticationReason(err)
		return p, reject(reason, "token not accepted", err)
	}
	if p.Namespace == "" || p.ServiceAccount == "" {
		return Principal{}, reject(ReasonTokenRejected, "token not accepted", errors.New("no ServiceAccount in the review"))
	}
	return p, nil
}

// authorize requires the principal on the allowlist and returns its SPIFFE ID.
func (s *Service) authorize(p Principal) (spiffeid.ID, error) {
	if !s.allow.Allowed(p.Namespace, p.ServiceAccount) {
		return spiffeid.ID{}, reject(ReasonNotAllowed, "identity may not hold an SVID", nil)
	}
	id, err := spiffe.ServiceAccountID(s.td, p.Namespace, p.ServiceAccount)
	if err != nil {
		return spiffeid.ID{}, reject(ReasonInvalidIdentity, "identity has no SPIFFE ID", err)
	}
	return id, nil
}

func (s *Service) sign(der []byte, id spiffeid.ID) (*discoveryv1.BootstrapResponse, error) {
	csr, err := pki.CheckCSR(der)
	if err != nil {
		return nil, reject(ReasonInvalidCSR, "CSR refused: "+err.Error(), nil)
	}
	ca, bundle, err := s.ca.Current()
	if err != nil {
		return nil, reject(ReasonCAUnavailable, "no usable CA", err)
	}
	leaf, _, err := ca.SignSVID(csr, id, s.ttl, s.now())
	switch {
	case errors.Is(err, pki.ErrCAExpired):
		return nil, reject(ReasonCAUnavailable, "no usable CA", err)
	case err != nil:
		return nil, reject(ReasonSigningFailed, "signing failed", err)
	}
	return &discoveryv1.BootstrapResponse{
		SvidChainPem:   chainPEM(leaf, ca.Certificate()),
		TrustBundlePem: bundle.PEM(),
		NotAfter:       timestamppb.New(leaf.NotAfter),
	}, nil
}

// chainPEM encodes the leaf, followed by the CA when the CA is an intermediate.
func chainPEM(leaf, ca *x509.Certificate) []byte {
	out := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw})
	if !bytes.Equal(ca.RawIssuer, ca.RawSubject) {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})...)
	}
	return out
}

// rejected counts every refused bootstrap, logs and reports it unless its (reason, principal)
// has been logged too often lately, and returns its gRPC status.
func (s *Service) rejected(ctx context.Context, p Principal, req *discoveryv1.BootstrapRequest, err error) error {
	var rej *rejectError
	if !errors.As(err, &rej) {
		rej = &rejectError{reason: ReasonSigningFailed, public: "internal error", err: err}
	}
	r := Rejection{Principal: p, Reason: rej.reason, Code: rej.reason.Code(), Message: rej.Error(), Peer: peerAddr(ctx)}
	s.metrics.rejected(r.Reason)
	st := status.Error(r.Code, fmt.Sprintf("bootstrap rejected (%s): %s", r.Reason, rej.public))
	ok, suppressed := s.quiet.Allow(string(r.Reason)+" "+p.String(), s.now())
	if !ok {
		s.metrics.suppressed.Inc()
		return st
	}
	r.Suppressed = suppressed
	s.log.Info("Rejected bootstrap", "principal", p.String(), "pod", p.PodName, "scope", scopeString(req.GetScope()),
		"reason", r.Reason, "code", r.Code.String(), "peer", r.Peer, "detail", r.Message, "suppressed", suppressed)
	if r.Reason != ReasonCanceled {
		s.reporter.BootstrapRejected(ctx, r)
	}
	return st
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

func scopeString(p *discoveryv1.Scope) string {
	s, err := cache.ScopeFromProto(p)
	if err != nil {
		return "none"
	}
	return s.String()
}
