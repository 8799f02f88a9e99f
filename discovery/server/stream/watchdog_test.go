package stream

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/servertest"
)

// bigListener is a payload larger than the smallest flow-control windows.
var bigListener = strings.Repeat("x", 2<<20)

// stuckProxy subscribes to the web scope with the smallest flow-control windows, ACKs its first
// snapshot and then reads nothing more. The cache then takes a snapshot larger than the windows,
// whose push the proxy never reads; stuckProxy returns once the server has encoded that push.
func (e *env) stuckProxy(t *testing.T) *proxy {
	t.Helper()
	conn := servertest.Dial(t, e.addr, e.pki.StreamClientTLS(e.pki.SVID(t, webID)),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	p := open(t, discoveryv1.NewDiscoveryClient(conn), subscribeMessage("stuck", webScope))
	acks, deltas := testutil.ToFloat64(e.srv.metrics.acks), testutil.ToFloat64(e.srv.metrics.encoded.WithLabelValues("delta"))
	p.ack(p.mustRecv())
	waitFor(t, "the first ACK", func() bool { return testutil.ToFloat64(e.srv.metrics.acks) == acks+1 })
	e.set(t, webScope, map[string]string{"listener": bigListener})
	waitFor(t, "the large push to be encoded", func() bool {
		return testutil.ToFloat64(e.srv.metrics.encoded.WithLabelValues("delta")) == deltas+1
	})
	return p
}

// ackUnread answers the snapshot in flight without reading it: its version is the cache's, and
// its nonce, were nonces a bare counter, the second.
func (e *env) ackUnread(p *proxy, nonce string) {
	p.send(&discoveryv1.ClientMessage{Kind: &discoveryv1.ClientMessage_Ack{Ack: &discoveryv1.Ack{
		Version: e.cache.Get(webScope).Version(), Nonce: nonce,
	}}})
}

// closedConnection waits, without reading, for the server to close the stuck proxy's
// connection, its only one; then Recv fails with Unavailable instead of delivering the rest of
// the snapshot.
func (e *env) closedConnection(t *testing.T, p *proxy) {
	t.Helper()
	waitFor(t, "the server to close the connection", func() bool {
		open, _ := e.srv.listeners.Open("127.0.0.1")
		return open == 0
	})
	if _, err := p.recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("the stuck proxy reads %v, want Unavailable (connection closed)", err)
	}
}

// Tests that a proxy cannot answer a snapshot it has not read: the nonce is unpredictable, so an
// ACK that guesses it breaks the protocol, and the connection, where the unread snapshot waits,
// is closed.
func TestAProxyCannotAckASnapshotItHasNotRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.stuckProxy(t)
	e.ackUnread(p, "2")
	waitFor(t, "the guessed ACK to close the stream", func() bool {
		return testutil.ToFloat64(e.srv.metrics.denied.WithLabelValues(string(ReasonProtocolViolation))) == 1 &&
			testutil.CollectAndCount(e.srv.metrics.connected) == 0
	})
	e.closedConnection(t, p)
}

// Tests that were a proxy to answer a snapshot it has not read (here the nonces are made
// predictable), the next send, blocked in flow control, closes its connection at the ACK
// deadline: the stream ends, the identity's slot is given back and the proxy's connection is gone.
func TestASendBlockedInFlowControlClosesItsConnection(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.AckTimeout = 500 * time.Millisecond })
	e.srv.entropy = bytes.NewReader(make([]byte, 1024))
	p := e.stuckProxy(t)
	e.ackUnread(p, "2-0000000000000000")
	waitFor(t, "the unread ACK", func() bool { return testutil.ToFloat64(e.srv.metrics.acks) == 2 })
	e.set(t, webScope, map[string]string{"listener": bigListener + "y"})
	waitFor(t, "the stuck stream to close", func() bool {
		return testutil.ToFloat64(e.srv.metrics.denied.WithLabelValues(string(ReasonSendTimeout))) == 1 &&
			testutil.CollectAndCount(e.srv.metrics.connected) == 0
	})
	e.closedConnection(t, p)
	e.subscribe(t, webID, "next", webScope).mustRecv()
}

// Tests that a snapshot left unread and unanswered past the ACK deadline closes the connection
// it waits in, not only the stream.
func TestAnUnreadSnapshotClosesItsConnectionAtTheAckDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.AckTimeout = 500 * time.Millisecond })
	p := e.stuckProxy(t)
	waitFor(t, "the unanswered stream to close", func() bool {
		return testutil.ToFloat64(e.srv.metrics.denied.WithLabelValues(string(ReasonAckTimeout))) == 1
	})
	e.closedConnection(t, p)
}

// Tests that Reauthorize and Shutdown end the stream and the connection of a proxy that does not
// read long before the ACK deadline, and that the server then stops gracefully at once.
func TestCancelEndsTheConnectionOfAProxyThatDoesNotRead(t *testing.T) {
	t.Parallel()
	t.Run("Reauthorize", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		p := e.stuckProxy(t)
		e.scopes.set("prod/web", "")
		if n := e.srv.Reauthorize(); n != 1 {
			t.Fatalf("Reauthorize closed %d streams, want 1", n)
		}
		waitFor(t, "the revoked stream to end", func() bool { return testutil.CollectAndCount(e.srv.metrics.connected) == 0 })
		e.closedConnection(t, p)
	})
	t.Run("Shutdown", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.stuckProxy(t)
		e.srv.Shutdown()
		stopped := make(chan struct{})
		go func() {
			e.gs.GracefulStop()
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-time.After(5 * time.Second):
			e.gs.Stop()
			<-stopped
			t.Fatal("the graceful stop still waited for the stuck stream 5 s after Shutdown")
		}
	})
}
