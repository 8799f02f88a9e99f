package bootstrap

import (
	"context"
	"crypto/tls"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/pki/pkitest"
)

// delayedReviewer reviews every token after delay, like an API server under load: a token
// registered with legit authenticates as its principal, any other is refused.
type delayedReviewer struct {
	delay time.Duration

	mu    sync.Mutex
	legit map[string]Principal
}

func (r *delayedReviewer) Authenticate(ctx context.Context, token string) (Principal, error) {
	timer := time.NewTimer(r.delay)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
		return Principal{}, ctx.Err()
	}
	r.mu.Lock()
	p, ok := r.legit[token]
	r.mu.Unlock()
	if !ok {
		return Principal{}, fmt.Errorf("%w: signature does not verify", ErrUnauthenticated)
	}
	return p, nil
}

// issue returns a new token of p that the reviewer authenticates.
func (r *delayedReviewer) issue(p Principal, serial int) string {
	token := tokenWithID(p.Namespace, p.ServiceAccount, fmt.Sprintf("legit-%d", serial))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.legit[token] = p
	return token
}

// tokenWithID returns a well-formed token of namespace/sa that differs from every other by id,
// so that no memory of refused tokens ever matches it.
func tokenWithID(namespace, sa, id string) string {
	return pkitest.TokenClaims(map[string]any{
		"aud": []string{"coxswain-discovery"},
		"exp": time.Now().Add(time.Hour).Unix(),
		"sub": "system:serviceaccount:" + namespace + ":" + sa,
		"jti": id,
	})
}

const tenantSVID = "spiffe://cluster.local/ns/tenant/sa/web-gw"

// attack runs, until ctx ends, one loop per source and stream that presents cert and sends a
// distinct forged token of namespace/sa each time. It returns how many bootstraps ended and
// the codes they ended with.
type attack struct {
	ended atomic.Int64
	mu    sync.Mutex
	codes map[codes.Code]int
	wg    sync.WaitGroup
}

func (e *admissionEnv) attack(t *testing.T, ctx context.Context, sources []string, cert *tls.Certificate, namespace, sa string) *attack {
	t.Helper()
	a := &attack{codes: map[codes.Code]int{}}
	var serial atomic.Int64
	for _, src := range sources {
		c := e.clientFrom(t, src, cert)
		for range DefaultMaxPerSource {
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				a.loop(ctx, t, c, func() string {
					return tokenWithID(namespace, sa, fmt.Sprintf("forged-%d", serial.Add(1)))
				})
			}()
		}
	}
	t.Cleanup(a.wg.Wait)
	return a
}

func (a *attack) loop(ctx context.Context, t *testing.T, c discoveryv1.DiscoveryClient, token func() string) {
	for ctx.Err() == nil {
		_, err := c.Bootstrap(ctx, withToken(t, token()))
		if ctx.Err() != nil {
			return
		}
		a.ended.Add(1)
		a.mu.Lock()
		a.codes[status.Code(err)]++
		a.mu.Unlock()
		if status.Code(err) == codes.ResourceExhausted {
			// A refused attacker retries at once in the field; a short pause here only keeps the
			// test from spinning the machine's cores.
			pause := time.NewTimer(5 * time.Millisecond)
			select {
			case <-pause.C:
			case <-ctx.Done():
				pause.Stop()
				return
			}
		}
	}
}

func (a *attack) seen() map[codes.Code]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[codes.Code]int, len(a.codes))
	for k, v := range a.codes {
		out[k] = v
	}
	return out
}

func loopbacks(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s.%d", prefix, i+1)
	}
	return out
}

// Tests that callers presenting a tenant's SVID with forged tokens, each distinct and from many
// sources, under a slow TokenReview, leave the renewal lane to the proxies whose SVID matches
// their token: every legitimate renewal of the other proxies (ten dedicated Gateways renewing at
// once) during the flood succeeds.
func TestForgedTokensWithAnSVIDDoNotStarveRenewals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, namespace, sa string
		laneRefusal         string
	}{
		// The forged tokens claim the shared proxy's subject: the SVID does not match it.
		{"tokens claiming another subject", sharedProxy.Namespace, sharedProxy.ServiceAccount, laneSubjectMismatch},
		// The forged tokens claim the SVID's own subject: the first refused review keeps the
		// SPIFFE ID out of the lane.
		{"tokens claiming the SVID's own subject", "tenant", "web-gw", laneRecentlyRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reviewer := &delayedReviewer{delay: 300 * time.Millisecond, legit: map[string]Principal{}}
			e := newAdmissionEnv(t, func(c *Config) {
				c.Authenticator = reviewer
				c.Allowlist = allowlist{
					"team/gw-0": true, "team/gw-1": true, "team/gw-2": true, "team/gw-3": true, "team/gw-4": true,
					"team/gw-5": true, "team/gw-6": true, "team/gw-7": true, "team/gw-8": true, "team/gw-9": true,
				}
				c.MaxConcurrent, c.MaxRenewalsConcurrent, c.MaxQueued = 2, 2, 16
			})
			ctx, stop := context.WithCancel(t.Context())
			a := e.attack(t, ctx, loopbacks("127.0.2", 10), e.pki.SVID(t, tenantSVID), tc.namespace, tc.sa)
			waitFor(t, "the flood under way, its first forged tokens refused by review", func() bool {
				return a.ended.Load() >= 40 && a.seen()[codes.Unauthenticated] > 0
			})

			const renewals = 10
			results := make(chan error, renewals)
			for i, src := range loopbacks("127.0.3", renewals) {
				proxy := Principal{Namespace: "team", ServiceAccount: fmt.Sprintf("gw-%d", i)}
				token := reviewer.issue(proxy, i)
				c := e.clientFrom(t, src, e.pki.SVID(t, "spiffe://cluster.local/ns/team/sa/"+proxy.ServiceAccount))
				go func() {
					_, err := c.Bootstrap(t.Context(), withToken(t, token))
					results <- err
				}()
			}
			ok := 0
			for range renewals {
				if err := <-results; err != nil {
					t.Logf("renewal refused: %v", err)
					continue
				}
				ok++
			}
			stop()
			if ok != renewals {
				t.Errorf("%d of %d renewals succeeded during the flood", ok, renewals)
			}
			seen := a.seen()
			t.Logf("attacker bootstraps ended: %v", seen)
			for code := range seen {
				if code != codes.Unauthenticated && code != codes.ResourceExhausted && code != codes.Unavailable {
					t.Errorf("an attacker's bootstrap ended with %s", code)
				}
			}
			if seen[codes.Unauthenticated] == 0 {
				t.Error("no forged token was refused by review")
			}
			if got := testutil.ToFloat64(e.svc.metrics.laneRefused.WithLabelValues(tc.laneRefusal)); got == 0 {
				t.Errorf("renewal lane refusals{%s} = 0", tc.laneRefusal)
			}
			if got := testutil.ToFloat64(e.svc.metrics.total.WithLabelValues(resultRejected, string(ReasonTokenRejected))); got == 0 {
				t.Error("rejected{TokenRejected} = 0")
			}
			if !reported(e.reporter.all(), ReasonTokenRejected) {
				t.Error("no TokenRejected rejection was reported")
			}
		})
	}
}

func reported(rs []Rejection, reason Reason) bool {
	for _, r := range rs {
		if r.Reason == reason && r.Code == reason.Code() {
			return true
		}
	}
	return false
}

// occupancy is how many requests hold or wait for a slot of l.
func occupancy(l *limiter) int { return len(l.slots) + len(l.queue) }

// Tests that one SPIFFE ID holds at most its share of the renewal lane: the requests beyond it
// compete in the first-bootstrap lane.
func TestRenewalLaneIsBoundedPerIdentity(t *testing.T) {
	t.Parallel()
	e := newAdmissionEnv(t, func(c *Config) {
		c.MaxConcurrent, c.MaxRenewalsConcurrent, c.MaxQueued, c.QueueWait, c.MaxRenewalsPerIdentity = 1, 1, 8, time.Minute, 2
	})
	cert := e.pki.SVID(t, "spiffe://cluster.local/ns/attacker/sa/slow")
	var results []<-chan error
	for _, src := range loopbacks("127.0.4", 3) {
		results = append(results, flood(t, e.clientFrom(t, src, cert), 1, slowToken))
	}
	waitFor(t, "two in the renewal lane, one in the other", func() bool {
		return occupancy(e.svc.renewals) == 2 && occupancy(e.svc.limiter) == 1
	})
	if got := testutil.ToFloat64(e.svc.metrics.laneRefused.WithLabelValues(laneIdentityBusy)); got != 1 {
		t.Errorf("renewal lane refusals{%s} = %v, want 1", laneIdentityBusy, got)
	}
	close(e.auth.gate)
	for _, r := range results {
		if err := <-r; err != nil {
			t.Errorf("bootstrap: %v", err)
		}
	}
	if n := len(e.svc.renewers.counts); n != 0 {
		t.Errorf("%d identities still counted in the renewal lane", n)
	}
}

// Tests that after a review refuses a token presented with an SVID, that SVID's SPIFFE ID takes
// the first-bootstrap lane, and that the memory of such IDs is bounded.
func TestRefusedIdentitiesLeaveTheRenewalLane(t *testing.T) {
	t.Parallel()
	e := newAdmissionEnv(t)
	e.auth.refuse = true
	cert := e.pki.SVID(t, "spiffe://cluster.local/ns/attacker/sa/forger")
	c := e.clientFrom(t, "127.0.5.1", cert)
	for i := range 3 {
		_, err := c.Bootstrap(t.Context(), withToken(t, tokenWithID("attacker", "forger", fmt.Sprint(i))))
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("forged token %d: %v, want Unauthenticated", i, err)
		}
	}
	if got := testutil.ToFloat64(e.svc.metrics.laneRefused.WithLabelValues(laneRecentlyRefused)); got != 2 {
		t.Errorf("renewal lane refusals{%s} = %v, want 2 (all but the first)", laneRecentlyRefused, got)
	}
	if !reported(e.reporter.all(), ReasonTokenRejected) {
		t.Error("no TokenRejected rejection was reported")
	}
	m := newRefusedSet(time.Minute)
	now := time.Now()
	for i := range 2 * maxRefused {
		m.add(fmt.Sprint(i), now)
	}
	if len(m.seen) > maxRefused {
		t.Errorf("the refused set holds %d entries, more than %d", len(m.seen), maxRefused)
	}
}
