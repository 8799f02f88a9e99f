package stream

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"coxswain.dev/coxswain/discovery/pki/pkitest"
	"coxswain.dev/coxswain/discovery/server/cache"
)

// Tests that when a root leaves the trust bundle, Reverify closes at once the live streams
// whose certificates it signed, and keeps those of the roots still trusted.
func TestReverifyClosesStreamsOfADistrustedRoot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	next := pkitest.NewCA(t, "cluster.local")
	both := pkitest.Bundle(e.pki.CA, next)
	e.pki.Bundle.Set(both)
	old := e.subscribe(t, webID, "old", webScope)
	old.mustRecv()
	fresh := open(t, e.client(t, pkitest.SignedSVID(t, next, apiID)), subscribeMessage("fresh", apiScope))
	fresh.ack(fresh.mustRecv())
	if n := e.srv.Reverify(); n != 0 {
		t.Fatalf("Reverify closed %d streams with the bundle unchanged", n)
	}

	e.pki.Bundle.Set(pkitest.Bundle(next))
	if n := e.srv.Reverify(); n != 1 {
		t.Fatalf("Reverify closed %d streams, want 1", n)
	}
	if _, err := old.recv(); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("stream of the distrusted root: %v, want Unauthenticated", err)
	}
	if got := testutil.ToFloat64(e.srv.metrics.denied.WithLabelValues(string(ReasonCertificateUntrusted))); got != 1 {
		t.Errorf("closed{CertificateUntrusted} = %v, want 1", got)
	}
	e.set(t, apiScope, map[string]string{"listener": "still served"})
	expect(t, fresh.mustRecv(), false, map[string]string{"listener": "still served"}, nil)
}

// Tests that a stream lives no longer than the session lifetime, even with a certificate that
// lives longer.
func TestStreamLivesNoLongerThanTheSessionLifetime(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.MaxSessionLifetime = 300 * time.Millisecond })
	p := e.subscribe(t, sharedID, "node", cache.SharedPool())
	p.ack(p.mustRecv())
	if _, err := p.recv(); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("got %v, want Unauthenticated at the end of the session lifetime", err)
	}
}
