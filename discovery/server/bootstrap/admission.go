package bootstrap

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"net"
	"sync"
	"time"

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
	// maxRefusedTokens bounds the memory of refused tokens.
	maxRefusedTokens = 4096
)

// refusedTokens remembers, by hash, tokens a review refused, for a short while.
type refusedTokens struct {
	ttl time.Duration

	mu   sync.Mutex
	seen map[[sha256.Size]byte]time.Time
}

func newRefusedTokens(ttl time.Duration) *refusedTokens {
	return &refusedTokens{ttl: ttl, seen: map[[sha256.Size]byte]time.Time{}}
}

func (r *refusedTokens) add(token string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.seen) >= maxRefusedTokens {
		for k, until := range r.seen {
			if !now.Before(until) {
				delete(r.seen, k)
			}
		}
	}
	if len(r.seen) < maxRefusedTokens {
		r.seen[sha256.Sum256([]byte(token))] = now.Add(r.ttl)
	}
}

func (r *refusedTokens) refused(token string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := sha256.Sum256([]byte(token))
	until, ok := r.seen[k]
	if ok && !now.Before(until) {
		delete(r.seen, k)
		return false
	}
	return ok
}

// sources counts the bootstraps of each source address that hold or wait for a slot.
type sources struct {
	max int

	mu     sync.Mutex
	counts map[string]int
}

func newSources(limit int) *sources { return &sources{max: limit, counts: map[string]int{}} }

// take counts one more bootstrap of host; on success the caller must call give.
func (s *sources) take(host string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counts[host] >= s.max {
		return reject(ReasonOverloaded, "too many bootstraps in progress from this address", nil)
	}
	s.counts[host]++
	return nil
}

func (s *sources) give(host string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counts[host] <= 1 {
		delete(s.counts, host)
		return
	}
	s.counts[host]--
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

// renewing reports whether the caller presented, on the bootstrap connection, an SVID of our
// trust domain that verifies against the current bundle: a live proxy renewing its identity,
// whose bootstrap takes the renewal lane instead of competing with first bootstraps.
func (s *Service) renewing(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return false
	}
	chain := info.State.PeerCertificates
	_, bundle, err := s.ca.Current()
	if err != nil {
		return false
	}
	opts := x509.VerifyOptions{
		Roots: bundle.Pool(), Intermediates: x509.NewCertPool(), CurrentTime: s.now(),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	for _, c := range chain[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := chain[0].Verify(opts); err != nil {
		return false
	}
	_, err = spiffe.PeerIDFromChain(chain, s.td)
	return err == nil
}
