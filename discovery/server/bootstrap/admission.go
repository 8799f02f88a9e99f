package bootstrap

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"net"
	"sync"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"coxswain.dev/coxswain/discovery/spiffe"
)

// Defaults of the admission checks that run before a request takes a bootstrap slot.
const (
	// DefaultMaxPerSource is how many bootstraps one source address may have running or queued.
	DefaultMaxPerSource = 4
	// DefaultRefusedTokenTTL is how long a token the API server refused is refused without a
	// new review.
	DefaultRefusedTokenTTL = 30 * time.Second
	// DefaultMaxRenewalsPerIdentity is how many bootstraps presenting the SVID of one SPIFFE ID
	// may run or wait in the renewal lane at once.
	DefaultMaxRenewalsPerIdentity = 4
	// DefaultRefusedIdentityTTL is how long a SPIFFE ID is kept out of the renewal lane after a
	// review refused a token presented with its SVID.
	DefaultRefusedIdentityTTL = time.Minute
	// maxRefused bounds the memory of each refused set.
	maxRefused = 4096
)

// Why a caller presenting a verified SVID is sent to the first-bootstrap lane: the label values
// of coxswain_discovery_bootstrap_renewal_lane_refused_total.
const (
	// laneSubjectMismatch: the token claims another ServiceAccount than the SVID names.
	laneSubjectMismatch = "SubjectMismatch"
	// laneRecentlyRefused: a review lately refused a token presented with this SVID's ID.
	laneRecentlyRefused = "RecentlyRefused"
	// laneIdentityBusy: the SVID's ID already holds its share of the renewal lane.
	laneIdentityBusy = "IdentityBusy"
)

// refusedSet remembers keys (tokens, SPIFFE IDs), by hash, for ttl after they were last added.
// It holds at most maxRefused live keys: beyond, new keys are not remembered.
type refusedSet struct {
	ttl time.Duration

	mu   sync.Mutex
	seen map[[sha256.Size]byte]time.Time
}

func newRefusedSet(ttl time.Duration) *refusedSet {
	return &refusedSet{ttl: ttl, seen: map[[sha256.Size]byte]time.Time{}}
}

func (r *refusedSet) add(key string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := sha256.Sum256([]byte(key))
	if _, ok := r.seen[k]; !ok && len(r.seen) >= maxRefused {
		for k, until := range r.seen {
			if !now.Before(until) {
				delete(r.seen, k)
			}
		}
		if len(r.seen) >= maxRefused {
			return
		}
	}
	r.seen[k] = now.Add(r.ttl)
}

func (r *refusedSet) refused(key string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := sha256.Sum256([]byte(key))
	until, ok := r.seen[k]
	if ok && !now.Before(until) {
		delete(r.seen, k)
		return false
	}
	return ok
}

// shares counts the requests of each key (a source address, a SPIFFE ID) in progress, up to max
// per key. Only keys with requests in progress take memory.
type shares struct {
	max int

	mu     sync.Mutex
	counts map[string]int
}

func newShares(limit int) *shares { return &shares{max: limit, counts: map[string]int{}} }

// take counts one more request of key, unless key holds max already; when it returns true the
// caller must call give.
func (s *shares) take(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counts[key] >= s.max {
		return false
	}
	s.counts[key]++
	return true
}

func (s *shares) give(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counts[key] <= 1 {
		delete(s.counts, key)
		return
	}
	s.counts[key]--
}

func sourceHost(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(p.Addr.String())
	if err != nil {
		return p.Addr.String()
	}
	return host
}

// presentedID returns the SPIFFE ID of the SVID the caller presented on the bootstrap
// connection when it is of our trust domain and verifies against the current bundle, and the
// zero ID otherwise.
func (s *Service) presentedID(ctx context.Context) spiffeid.ID {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return spiffeid.ID{}
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return spiffeid.ID{}
	}
	return s.verifiedID(info.State.PeerCertificates)
}

// verifiedID returns the SPIFFE ID of chain, a client certificate chain as presented, when it
// verifies for client auth against the current bundle and names an ID of our trust domain, and
// the zero ID otherwise (no chain included).
func (s *Service) verifiedID(chain []*x509.Certificate) spiffeid.ID {
	if len(chain) == 0 {
		return spiffeid.ID{}
	}
	_, bundle, err := s.ca.Current()
	if err != nil {
		return spiffeid.ID{}
	}
	opts := x509.VerifyOptions{
		Roots: bundle.Pool(), Intermediates: x509.NewCertPool(), CurrentTime: s.now(),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	for _, c := range chain[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := chain[0].Verify(opts); err != nil {
		return spiffeid.ID{}
	}
	id, err := spiffe.PeerIDFromChain(chain, s.td)
	if err != nil {
		return spiffeid.ID{}
	}
	return id
}

// lane picks the lane of a request whose token claims the SPIFFE ID claimed and whose caller
// presented a verified SVID of presented (or none). The renewal lane is for a live proxy
// renewing its own identity: it takes only a caller whose SVID names the token's claimed
// subject, while no review refused a token presented with that SVID lately and the ID holds
// fewer than its share of the lane. Everyone else competes for first-bootstrap slots. The
// returned give ends the request's share of the renewal lane.
func (s *Service) lane(presented, claimed spiffeid.ID) (lane *limiter, give func()) {
	if presented.IsZero() {
		return s.limiter, func() {}
	}
	key := presented.String()
	var refusal string
	switch {
	case presented != claimed:
		refusal = laneSubjectMismatch
	case s.refusedIDs.refused(key, s.now()):
		refusal = laneRecentlyRefused
	case !s.renewers.take(key):
		refusal = laneIdentityBusy
	default:
		return s.renewals, func() { s.renewers.give(key) }
	}
	s.metrics.laneRefused.WithLabelValues(refusal).Inc()
	if ok, suppressed := s.quiet.Allow("lane "+refusal+" "+key, s.now()); ok {
		s.log.Info("Refused renewal lane", "spiffeID", key, "claimed", claimed.String(), "reason", refusal, "suppressed", suppressed)
	}
	return s.limiter, func() {}
}
