package stream

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/cache"
)

func withVersion(m *discoveryv1.ClientMessage, v uint32) *discoveryv1.ClientMessage {
	m.GetSubscribe().WireVersion = v
	return m
}

// Tests that a subscription is refused, before any snapshot byte, unless its first message is a
// Subscribe of this wire version for a scope the peer's identity owns.
func TestSubscribeRejections(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		id        string
		first     *discoveryv1.ClientMessage
		configure func(*env)
		code      codes.Code
		reason    Reason
	}{
		{
			name: "Gateway A's identity asking for Gateway B is refused", id: webID,
			first: subscribeMessage("n", apiScope), code: codes.PermissionDenied, reason: ReasonScopeNotAuthorized,
		},
		{
			name: "a dedicated identity asking for the shared pool is refused", id: webID,
			first: subscribeMessage("n", cache.SharedPool()), code: codes.PermissionDenied, reason: ReasonScopeNotAuthorized,
		},
		{
			name: "the shared pool identity asking for a Gateway is refused", id: sharedID,
			first: subscribeMessage("n", webScope), code: codes.PermissionDenied, reason: ReasonScopeNotAuthorized,
		},
		{
			name:  "the expected ServiceAccount of another namespace is refused",
			id:    "spiffe://cluster.local/ns/staging/sa/web-coxswain",
			first: subscribeMessage("n", webScope), code: codes.PermissionDenied, reason: ReasonScopeNotAuthorized,
		},
		{
			name:  "the shared proxy ServiceAccount of another namespace is refused",
			id:    "spiffe://cluster.local/ns/default/sa/coxswain-shared-proxy",
			first: subscribeMessage("n", cache.SharedPool()), code: codes.PermissionDenied, reason: ReasonScopeNotAuthorized,
		},
		{
			name: "an unknown Gateway is refused", id: webID,
			first: subscribeMessage("n", cache.Gateway("prod", "gone")), code: codes.PermissionDenied, reason: ReasonScopeNotAuthorized,
		},
		{
			name: "a Gateway while the authority cannot answer is refused as unavailable", id: webID,
			first:     subscribeMessage("n", webScope),
			configure: func(e *env) { e.scopes.err = errors.New("cache not synced") },
			code:      codes.Unavailable, reason: ReasonScopeUnknown,
		},
		{
			name: "a subscription without a scope kind is refused", id: sharedID,
			first: subscribeMessage("n", cache.Scope{}), code: codes.InvalidArgument, reason: ReasonInvalidSubscribe,
		},
		{
			name: "a subscription without a node ID is refused", id: sharedID,
			first: subscribeMessage("", cache.SharedPool()), code: codes.InvalidArgument, reason: ReasonInvalidSubscribe,
		},
		{
			name: "a node ID with a terminal escape is refused", id: sharedID,
			first: subscribeMessage("proxy-0\x1b[2J", cache.SharedPool()), code: codes.InvalidArgument, reason: ReasonInvalidSubscribe,
		},
		{
			name: "a node ID with a bidirectional override is refused", id: sharedID,
			first: subscribeMessage("proxy-\u202e0", cache.SharedPool()), code: codes.InvalidArgument, reason: ReasonInvalidSubscribe,
		},
		{
			name: "a wire version one below is refused", id: sharedID,
			first: withVersion(subscribeMessage("n", cache.SharedPool()), discoveryv1.WireVersion-1),
			code:  codes.FailedPrecondition, reason: ReasonWireVersion,
		},
		{
			name: "a wire version one above is refused", id: sharedID,
			first: withVersion(subscribeMessage("n", cache.SharedPool()), discoveryv1.WireVersion+1),
			code:  codes.FailedPrecondition, reason: ReasonWireVersion,
		},
		{
			name: "a first message that is not Subscribe is refused", id: sharedID,
			first: &discoveryv1.ClientMessage{Kind: &discoveryv1.ClientMessage_Ack{Ack: &discoveryv1.Ack{}}},
			code:  codes.InvalidArgument, reason: ReasonNoSubscribe,
		},
		{
			name: "an empty first message is refused", id: sharedID,
			first: &discoveryv1.ClientMessage{}, code: codes.InvalidArgument, reason: ReasonNoSubscribe,
		},
		{
			name: "a stream that sends nothing is closed at the subscribe deadline", id: sharedID,
			code: codes.DeadlineExceeded, reason: ReasonSubscribeTimeout,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, func(c *Config) { c.SubscribeTimeout = 200 * time.Millisecond })
			if tc.configure != nil {
				tc.configure(e)
			}
			p := open(t, e.client(t, e.pki.SVID(t, tc.id)), tc.first)
			snap, err := p.recv()
			if status.Code(err) != tc.code || snap != nil {
				t.Fatalf("got snapshot %v, error %v; want code %s and no snapshot", snap, err, tc.code)
			}
			if got := testutil.ToFloat64(e.srv.metrics.denied.WithLabelValues(string(tc.reason))); got != 1 {
				t.Errorf("closed{%s} = %v, want 1", tc.reason, got)
			}
			if got := testutil.ToFloat64(e.srv.metrics.sent.WithLabelValues("full")); got != 0 {
				t.Errorf("%v full snapshots sent", got)
			}
		})
	}
}

// Tests that the rightful identities get their scope.
func TestSubscribeAcceptsTheOwnerOfTheScope(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, tc := range []struct {
		id    string
		scope cache.Scope
	}{{sharedID, cache.SharedPool()}, {webID, webScope}, {apiID, apiScope}} {
		snap := e.subscribe(t, tc.id, tc.id, tc.scope).mustRecv()
		if !snap.GetFull() || len(snap.GetResources()) != 1 || snap.GetResources()[0].GetKey() != "listener" {
			t.Errorf("%s got %v, want the full snapshot of %s", tc.id, snap, tc.scope)
		}
	}
}

// Tests that a new stream of the same node of the same identity supersedes the old one.
func TestNewStreamOfANodeSupersedesTheOldOne(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	old := e.subscribe(t, webID, "node-1", webScope)
	old.mustRecv()
	e.subscribe(t, webID, "node-1", webScope).mustRecv()
	if _, err := old.recv(); status.Code(err) != codes.Aborted {
		t.Fatalf("old stream: %v, want Aborted", err)
	}
}
