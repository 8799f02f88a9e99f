package stream

import (
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"coxswain.dev/coxswain/discovery/server/cache"
)

// Tests that a stream whose authorization went away receives nothing more, even when the
// snapshot changes before anyone calls Reauthorize: every send checks the authority again.
func TestRevokedStreamReceivesNoNewContent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	web := e.subscribe(t, webID, "web", webScope)
	web.ack(web.mustRecv())
	waitFor(t, "the ACK", func() bool { return testutil.ToFloat64(e.srv.metrics.acks) == 1 })

	e.scopes.set("prod/web", "web-otherclass")
	e.set(t, webScope, map[string]string{"listener": "secret of the new owner"})
	snap, err := web.recv()
	if status.Code(err) != codes.PermissionDenied || snap != nil {
		t.Fatalf("revoked stream got snapshot %v, error %v; want PermissionDenied and nothing", snap, err)
	}
	if got := testutil.ToFloat64(e.srv.metrics.denied.WithLabelValues(string(ReasonRevoked))); got != 1 {
		t.Errorf("closed{Revoked} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(e.srv.metrics.sent.WithLabelValues("delta")); got != 0 {
		t.Errorf("%v deltas sent to a revoked stream", got)
	}
}

// racingScopes answers like scopeTable, but the first answer for a Gateway is followed, before
// the caller can act on it, by a revocation and a Reauthorize: the interleaving of a rebuild
// between a session's authorize and its register.
type racingScopes struct {
	*scopeTable
	once   sync.Once
	revoke func()
}

func (r *racingScopes) ExpectedServiceAccount(namespace, name string) (string, error) {
	sa, err := r.scopeTable.ExpectedServiceAccount(namespace, name)
	r.once.Do(r.revoke)
	return sa, err
}

// Tests that a Reauthorize between a session's authorization and its registration does not
// miss it: the session is refused before it registers, and gets no snapshot.
func TestReauthorizeBetweenAuthorizeAndRegister(t *testing.T) {
	t.Parallel()
	racing := &racingScopes{}
	e := newEnv(t, func(c *Config) {
		racing.scopeTable = c.Scopes.(*scopeTable)
		c.Scopes = racing
	})
	racing.revoke = func() {
		e.scopes.set("prod/web", "web-otherclass")
		e.srv.Reauthorize()
	}
	snap, err := e.subscribe(t, webID, "web", webScope).recv()
	if status.Code(err) != codes.PermissionDenied || snap != nil {
		t.Fatalf("got snapshot %v, error %v; want PermissionDenied and no snapshot", snap, err)
	}
	if got := testutil.ToFloat64(e.srv.metrics.denied.WithLabelValues(string(ReasonScopeNotAuthorized))); got != 1 {
		t.Errorf("closed{ScopeNotAuthorized} = %v, want 1 (refused at registration, not revoked later)", got)
	}
}

// Tests that a node ID names a node of one identity only: another identity using the same node
// ID neither locks the owner out nor closes its stream.
func TestNodeIDOfAnotherIdentityLocksNobodyOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	squatter := e.subscribe(t, apiID, "web-0", apiScope)
	squatter.ack(squatter.mustRecv())
	owner := e.subscribe(t, webID, "web-0", webScope)
	owner.ack(owner.mustRecv())

	e.set(t, apiScope, map[string]string{"listener": "api v2"})
	expect(t, squatter.mustRecv(), false, map[string]string{"listener": "api v2"}, nil)
	if got := testutil.ToFloat64(e.srv.metrics.denied.WithLabelValues(string(ReasonSuperseded))); got != 0 {
		t.Errorf("closed{Superseded} = %v, want 0", got)
	}
}

// Tests that a refused scope tells the proxy nothing about other namespaces: asking for a
// Gateway that has a dedicated proxy, and for one that has none, get the same status.
func TestScopeRefusalsAreUniform(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.scopes.set("staging/api", "api-coxswain")
	_, dedicated := e.subscribe(t, webID, "a", cache.Gateway("staging", "api")).recv()
	_, none := e.subscribe(t, webID, "b", cache.Gateway("staging", "nothing")).recv()
	_, pool := e.subscribe(t, webID, "c", cache.SharedPool()).recv()
	for _, err := range []error{dedicated, none, pool} {
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("got %v, want PermissionDenied", err)
		}
	}
	if status.Convert(dedicated).Message() != status.Convert(none).Message() ||
		status.Convert(none).Message() != status.Convert(pool).Message() {
		t.Fatalf("refusals differ:\n%q\n%q\n%q", status.Convert(dedicated).Message(),
			status.Convert(none).Message(), status.Convert(pool).Message())
	}
}
