package bootstrap

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/pki/pkitest"
	"coxswain.dev/coxswain/discovery/server/servertest"
)

// slowAuthenticator reviews like a busy API server: tokens whose subject names the SA "slow"
// wait for gate; every other token is reviewed at once, as sharedProxy, unless refuse is set.
type slowAuthenticator struct {
	gate   chan struct{}
	refuse bool

	mu    sync.Mutex
	calls map[string]int
}

func (a *slowAuthenticator) Authenticate(ctx context.Context, token string) (Principal, error) {
	a.mu.Lock()
	a.calls[token]++
	a.mu.Unlock()
	if token == slowToken {
		select {
		case <-a.gate:
		case <-ctx.Done():
			return Principal{}, ctx.Err()
		}
	}
	if a.refuse {
		return Principal{}, ErrUnauthenticated
	}
	return sharedProxy, nil
}

func (a *slowAuthenticator) reviews() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, c := range a.calls {
		n += c
	}
	return n
}

var slowToken = pkitest.Token("attacker", "slow")

// admissionEnv is a bootstrap listener whose clients dial from chosen loopback addresses.
type admissionEnv struct {
	*env
	auth *slowAuthenticator
	addr string
}

func newAdmissionEnv(t *testing.T, configure ...func(*Config)) *admissionEnv {
	t.Helper()
	auth := &slowAuthenticator{gate: make(chan struct{}), calls: map[string]int{}}
	t.Cleanup(func() {
		select {
		case <-auth.gate:
		default:
			close(auth.gate)
		}
	})
	e := newEnv(t, append([]func(*Config){func(c *Config) { c.Authenticator = auth }}, configure...)...)
	gs, err := e.svc.NewGRPCServer(e.pki.BootstrapServerTLS())
	if err != nil {
		t.Fatal(err)
	}
	return &admissionEnv{env: e, auth: auth, addr: servertest.Serve(t, gs)}
}

// clientFrom dials the listener from source (a loopback address), presenting cert if not nil.
func (e *admissionEnv) clientFrom(t *testing.T, source string, cert *tls.Certificate) discoveryv1.DiscoveryClient {
	t.Helper()
	return discoveryv1.NewDiscoveryClient(dialFrom(t, e.addr, source, presenting(e.pki.BootstrapClientTLS(), cert)))
}

func withToken(t *testing.T, token string) *discoveryv1.BootstrapRequest {
	t.Helper()
	r := request(t)
	r.Token = token
	return r
}

// flood starts n bootstraps with token from c and returns their results.
func flood(t *testing.T, c discoveryv1.DiscoveryClient, n int, token string) <-chan error {
	t.Helper()
	results := make(chan error, n)
	for range n {
		go func() {
			_, err := c.Bootstrap(t.Context(), withToken(t, token))
			results <- err
		}()
	}
	return results
}

// Tests that tokens that cannot pass review are refused before they take a slot or cost a
// review, so that a flood of them leaves a real proxy's bootstrap untouched.
func TestGarbageTokensCostNoReview(t *testing.T) {
	t.Parallel()
	e := newAdmissionEnv(t, func(c *Config) { c.MaxConcurrent, c.MaxQueued = 1, 1 })
	garbage := []string{
		"garbage",
		"a.b.c",
		pkitest.TokenClaims(map[string]any{"aud": "kubernetes", "exp": time.Now().Add(time.Hour).Unix(), "sub": "system:serviceaccount:a:b"}),
		pkitest.TokenClaims(map[string]any{"aud": "coxswain-discovery", "exp": time.Now().Add(-time.Minute).Unix(), "sub": "system:serviceaccount:a:b"}),
		pkitest.TokenClaims(map[string]any{"aud": "coxswain-discovery", "exp": time.Now().Add(time.Hour).Unix(), "sub": "admin"}),
		unsigned(t, pkitest.Token("a", "b")),
	}
	c := e.clientFrom(t, "127.0.0.2", nil)
	for _, token := range garbage {
		for err := range collect(flood(t, c, 20, token), 20) {
			if status.Code(err) != codes.Unauthenticated {
				t.Fatalf("garbage token %.20q: %v, want Unauthenticated", token, err)
			}
		}
	}
	if n := e.auth.reviews(); n != 0 {
		t.Fatalf("garbage cost %d reviews", n)
	}
	if got := testutil.ToFloat64(e.svc.metrics.total.WithLabelValues(resultRejected, string(ReasonTokenRejected))); got != float64(20*len(garbage)) {
		t.Errorf("rejected{TokenRejected} = %v, want %d", got, 20*len(garbage))
	}
	if _, err := e.clientFrom(t, "127.0.0.1", nil).Bootstrap(t.Context(), request(t)); err != nil {
		t.Fatalf("real bootstrap: %v", err)
	}
}

// unsigned replaces the header of token with one that names no signing algorithm.
func unsigned(t *testing.T, token string) string {
	t.Helper()
	_, rest, ok := strings.Cut(token, ".")
	if !ok {
		t.Fatal("not a JWS")
	}
	return base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none"}`)) + "." + rest
}

func collect(ch <-chan error, n int) func(func(error) bool) {
	return func(yield func(error) bool) {
		for range n {
			if !yield(<-ch) {
				return
			}
		}
	}
}

// Tests that one source address cannot hold more than its share of the bootstrap slots and
// queue: well-formed forged tokens under a slow review exhaust that source only.
func TestBootstrapsPerSourceAreBounded(t *testing.T) {
	t.Parallel()
	e := newAdmissionEnv(t, func(c *Config) { c.MaxConcurrent, c.MaxQueued, c.MaxPerSource, c.QueueWait = 2, 8, 3, time.Minute })
	attacker := e.clientFrom(t, "127.0.0.2", nil)
	results := flood(t, attacker, 3, slowToken)
	waitFor(t, "the attacker's share in use", func() bool { return e.auth.reviews() == 2 && len(e.svc.limiter.queue) == 1 })
	if _, err := attacker.Bootstrap(t.Context(), withToken(t, pkitest.Token("attacker", "other"))); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("the attacker's fourth bootstrap: %v, want ResourceExhausted", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := e.clientFrom(t, "127.0.0.3", nil).Bootstrap(t.Context(), request(t))
		done <- err
	}()
	waitFor(t, "the other source queued", func() bool { return len(e.svc.limiter.queue) == 2 })
	close(e.auth.gate)
	if err := <-done; err != nil {
		t.Fatalf("bootstrap from another source: %v", err)
	}
	for range 3 {
		t.Logf("attacker bootstrap ended: %v", <-results)
	}
}

// Tests that a proxy renewing with a valid SVID bootstraps while first bootstraps are exhausted.
func TestRenewalsHaveTheirOwnLane(t *testing.T) {
	t.Parallel()
	e := newAdmissionEnv(t, func(c *Config) { c.MaxConcurrent, c.MaxQueued, c.QueueWait = 1, 1, time.Minute })
	results := flood(t, e.clientFrom(t, "127.0.0.2", nil), 2, slowToken)
	waitFor(t, "slot and queue full", func() bool { return e.auth.reviews() == 1 && len(e.svc.limiter.queue) == 1 })
	first := e.clientFrom(t, "127.0.0.3", nil)
	if _, err := first.Bootstrap(t.Context(), request(t)); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("first bootstrap during the flood: %v, want ResourceExhausted", err)
	}
	renewing := e.clientFrom(t, "127.0.0.3", e.pki.SVID(t, "spiffe://cluster.local/ns/coxswain-system/sa/coxswain-shared-proxy"))
	start := time.Now()
	if _, err := renewing.Bootstrap(t.Context(), request(t)); err != nil {
		t.Fatalf("renewal during the flood: %v", err)
	}
	t.Logf("renewal latency during the flood: %s", time.Since(start))
	foreign := servertest.NewPKI(t).SVID(t, "spiffe://cluster.local/ns/coxswain-system/sa/coxswain-shared-proxy")
	if _, err := e.clientFrom(t, "127.0.0.4", foreign).Bootstrap(t.Context(), request(t)); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a certificate of another CA took the renewal lane: %v", err)
	}
	close(e.auth.gate)
	for range 2 {
		t.Logf("flood bootstrap ended: %v", <-results)
	}
}

// Tests that a token the review refused is refused again without a review for a while.
func TestRefusedTokensAreNotReviewedAgain(t *testing.T) {
	t.Parallel()
	e := newAdmissionEnv(t)
	e.auth.refuse = true
	token := pkitest.Token("attacker", "replayed")
	c := e.clientFrom(t, "127.0.0.1", nil)
	for range 5 {
		if _, err := c.Bootstrap(t.Context(), withToken(t, token)); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("got %v, want Unauthenticated", err)
		}
	}
	if n := e.auth.reviews(); n != 1 {
		t.Fatalf("%d reviews of one refused token, want 1", n)
	}
}
