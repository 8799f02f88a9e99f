package stream

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/cache"
)

// contents decodes a snapshot into key -> string payload, plus its removed keys.
func contents(t *testing.T, s *discoveryv1.Snapshot) (map[string]string, []string) {
	t.Helper()
	out := map[string]string{}
	for _, r := range s.GetResources() {
		var v wrapperspb.StringValue
		if err := r.GetPayload().UnmarshalTo(&v); err != nil {
			t.Fatal(err)
		}
		out[r.GetKey()] = v.GetValue()
	}
	return out, s.GetRemovedKeys()
}

func expect(t *testing.T, s *discoveryv1.Snapshot, full bool, upserts map[string]string, removed []string) {
	t.Helper()
	if s.GetFull() != full {
		t.Errorf("full = %v, want %v", s.GetFull(), full)
	}
	got, gotRemoved := contents(t, s)
	if diff := cmp.Diff(upserts, got); diff != "" {
		t.Errorf("resources (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(removed, gotRemoved); diff != "" {
		t.Errorf("removed keys (-want +got):\n%s", diff)
	}
}

// Tests that a stream gets a full snapshot, then deltas against what it acknowledged, with
// updates arriving while a message is in flight coalesced into one delta.
func TestPushFullThenDeltasThenCoalescing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.set(t, webScope, map[string]string{"a": "1", "b": "1", "c": "1"})
	p := e.subscribe(t, webID, "node", webScope)

	full := p.mustRecv()
	expect(t, full, true, map[string]string{"a": "1", "b": "1", "c": "1"}, nil)
	p.ack(full)

	e.set(t, webScope, map[string]string{"a": "2", "b": "1", "d": "1"})
	delta := p.mustRecv()
	expect(t, delta, false, map[string]string{"a": "2", "d": "1"}, []string{"c"})

	// Two updates while the delta is unanswered: the proxy sees only the last, as one delta
	// against the state it is about to acknowledge.
	e.set(t, webScope, map[string]string{"a": "3", "b": "1", "d": "1"})
	e.set(t, webScope, map[string]string{"b": "1", "d": "1", "e": "4"})
	p.ack(delta)
	coalesced := p.mustRecv()
	expect(t, coalesced, false, map[string]string{"e": "4"}, []string{"a"})
	if coalesced.GetVersion() != e.cache.Get(webScope).Version() {
		t.Errorf("coalesced version %s, want the latest %s", coalesced.GetVersion(), e.cache.Get(webScope).Version())
	}
	p.ack(coalesced)
	waitFor(t, "three ACKs", func() bool { return testutil.ToFloat64(e.srv.metrics.acks) == 3 })

	if got := testutil.ToFloat64(e.srv.metrics.sent.WithLabelValues("full")); got != 1 {
		t.Errorf("full snapshots sent = %v, want 1", got)
	}
	if got := testutil.ToFloat64(e.srv.metrics.sent.WithLabelValues("delta")); got != 2 {
		t.Errorf("deltas sent = %v, want 2", got)
	}
	if got := testutil.CollectAndCount(e.srv.metrics.ackDelay); got != 1 {
		t.Errorf("ack delay series = %d", got)
	}
	if got := testutil.ToFloat64(e.srv.metrics.connected.WithLabelValues(webScope.String())); got != 1 {
		t.Errorf("connected{%s} = %v, want 1", webScope, got)
	}
}

// Tests that an unchanged Set sends nothing: the next message is the next real change.
func TestPushUnchangedSetSendsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.subscribe(t, sharedID, "node", cache.SharedPool())
	p.ack(p.mustRecv())
	if e.set(t, cache.SharedPool(), map[string]string{"listener": cache.SharedPool().String()}) {
		t.Fatal("an unchanged Set reported a change")
	}
	e.set(t, cache.SharedPool(), map[string]string{"listener": "new"})
	expect(t, p.mustRecv(), false, map[string]string{"listener": "new"}, nil)
	if got := testutil.ToFloat64(e.srv.metrics.sent.WithLabelValues("full")) + testutil.ToFloat64(e.srv.metrics.sent.WithLabelValues("delta")); got != 2 {
		t.Errorf("messages sent = %v, want 2", got)
	}
}

// Tests that a NACK brings a full snapshot, and that a NACKed full snapshot is not resent until
// the version changes.
func TestPushNackTriggersFullResend(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.subscribe(t, sharedID, "node", cache.SharedPool())
	p.ack(p.mustRecv())

	e.set(t, cache.SharedPool(), map[string]string{"listener": "v2", "extra": "v2"})
	delta := p.mustRecv()
	p.nack(delta, "route table did not validate")
	full := p.mustRecv()
	expect(t, full, true, map[string]string{"listener": "v2", "extra": "v2"}, nil)
	if full.GetVersion() != delta.GetVersion() || full.GetNonce() == delta.GetNonce() {
		t.Errorf("resend has version %s nonce %s after %s %s", full.GetVersion(), full.GetNonce(), delta.GetVersion(), delta.GetNonce())
	}

	p.nack(full, "still bad")
	waitFor(t, "two NACKs", func() bool { return testutil.ToFloat64(e.srv.metrics.nacks) == 2 })
	e.set(t, cache.SharedPool(), map[string]string{"listener": "v3"})
	expect(t, p.mustRecv(), true, map[string]string{"listener": "v3"}, nil)
}

// Tests that an answer for a message not in flight breaks the protocol.
func TestPushRefusesAnAckOfAnotherNonce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.subscribe(t, sharedID, "node", cache.SharedPool())
	s := p.mustRecv()
	s.Nonce += "x"
	p.ack(s)
	if _, err := p.recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("got %v, want InvalidArgument", err)
	}
}

// Tests that Reauthorize closes exactly the live streams whose authorization went away.
func TestReauthorizeRevokesLiveStreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	web := e.subscribe(t, webID, "web", webScope)
	web.ack(web.mustRecv())
	api := e.subscribe(t, apiID, "api", apiScope)
	api.ack(api.mustRecv())
	waitFor(t, "both ACKs", func() bool { return testutil.ToFloat64(e.srv.metrics.acks) == 2 })

	if n := e.srv.Reauthorize(); n != 0 {
		t.Fatalf("Reauthorize closed %d streams with nothing changed", n)
	}
	e.scopes.set("prod/web", "web-otherclass")
	if n := e.srv.Reauthorize(); n != 1 {
		t.Fatalf("Reauthorize closed %d streams, want 1", n)
	}
	if _, err := web.recv(); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("revoked stream: %v, want PermissionDenied", err)
	}
	e.set(t, apiScope, map[string]string{"listener": "still served"})
	expect(t, api.mustRecv(), false, map[string]string{"listener": "still served"}, nil)
	waitFor(t, "the revoked stream to leave the gauge", func() bool {
		return testutil.CollectAndCount(e.srv.metrics.connected) == 1
	})
}

// Tests that Shutdown closes live streams as unavailable and refuses new ones.
func TestShutdownClosesStreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.subscribe(t, sharedID, "node", cache.SharedPool())
	p.mustRecv()
	e.srv.Shutdown()
	if _, err := p.recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("live stream: %v, want Unavailable", err)
	}
	if _, err := e.subscribe(t, sharedID, "node-2", cache.SharedPool()).recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("new stream: %v, want Unavailable", err)
	}
}

// Tests that a stream closes when the peer certificate expires.
func TestStreamClosesWhenThePeerCertificateExpires(t *testing.T) {
	t.Parallel()
	var offset atomic.Int64
	e := newEnv(t, func(c *Config) { c.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) } })
	cert := e.pki.SVID(t, sharedID)
	// Move the server's clock to half a second before the certificate expires.
	offset.Store(int64(time.Until(cert.Leaf.NotAfter) - 500*time.Millisecond))
	p := open(t, e.client(t, cert), subscribeMessage("node", cache.SharedPool()))
	p.mustRecv()
	if _, err := p.recv(); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("got %v, want Unauthenticated", err)
	}
}
