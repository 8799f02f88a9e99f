package stream

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/printable"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/internal/connlimit"
)

const (
	// flushGrace is how long the message in flight of a session that ended may take to leave
	// before its connection is closed.
	flushGrace = 2 * time.Second
)

// session is one subscribed stream. Only its run goroutine touches the push state.
type session struct {
	srv    *Server
	id     Identity
	nodeID string
	scope  cache.Scope
	stream discoveryv1.Discovery_StreamServer
	recv   <-chan received
	watch  *cache.Watch
	// inline says the proxy takes no route sets: it is sent each snapshot's inline layout
	// (cache.Snapshot.Inline), and acked, rejected and every snapshot in flight are of that
	// layout.
	inline bool

	ctx    context.Context
	cancel context.CancelCauseFunc
	// conn is the connection the stream rides, nil when the listener is not the server's; sentFrom
	// is how many bytes it had written when the message in flight was sent.
	conn     *connlimit.Conn
	sentFrom int64

	// acked is what the proxy holds; nil until its first ACK.
	acked *cache.Snapshot
	// inflight is the message awaiting its ACK or NACK; nil when none.
	inflight *inflight
	// needFull asks for a full snapshot: at the start and after a NACK.
	needFull bool
	// rejected is a version whose full snapshot was NACKed; it is not sent again.
	rejected string
	nonces   uint64
	// answers is what Server.Proxies reports of this stream.
	answers answers
}

type inflight struct {
	// snap is the snapshot sent, of the session's layout; primary is the cache's snapshot it
	// was made from (snap itself for a proxy that takes route sets), whose version the session
	// reports and convergence follows.
	snap, primary *cache.Snapshot
	nonce         string
	full          bool
	// size is the encoded message's; key names its shared body in the identity's budget.
	size int
	key  bodyKey
}

// newSession derives the session context, which ends with the stream or on cancel.
func newSession(ctx context.Context, s *Server, id Identity, nodeID string, scope cache.Scope,
	stream discoveryv1.Discovery_StreamServer, recv <-chan received,
) *session {
	sctx, cancel := context.WithCancelCause(ctx)
	p := &session{
		srv: s, id: id, nodeID: nodeID, scope: scope, stream: stream, recv: recv,
		ctx: sctx, cancel: cancel, needFull: true, conn: s.connection(ctx),
	}
	p.answers.state = ProxyState{NodeID: nodeID, SPIFFEID: id.ID.String()}
	return p
}

// run pushes snapshots until the client leaves, breaks the protocol, leaves a snapshot
// unanswered past the ACK deadline, the session is cancelled or the peer certificate expires.
// One message in flight bounds what a session queues to one snapshot, and an unpredictable nonce
// makes an ACK proof that the proxy received all of it.
func (p *session) run() error {
	err := p.loop()
	p.release()
	return err
}

func (p *session) loop() error {
	expiry := time.AfterFunc(p.id.NotAfter.Sub(p.srv.now()), func() {
		p.cancel(deny(ReasonCertificateExpired, "peer certificate or session expired at %s", p.id.NotAfter.UTC().Format(time.RFC3339)))
	})
	defer expiry.Stop()
	answer := time.NewTimer(p.srv.limits.ackTimeout)
	answer.Stop()
	defer answer.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return context.Cause(p.ctx)
		case <-answer.C:
			return deny(ReasonAckTimeout, "snapshot %s not answered within %s", p.inflight.snap.Version(), p.srv.limits.ackTimeout)
		case <-p.watch.Changed():
		case r := <-p.recv:
			if r.err != nil {
				return r.err
			}
			if err := p.handle(r.msg); err != nil {
				return err
			}
			if p.inflight == nil {
				answer.Stop()
			}
		}
		sent, err := p.push()
		if err != nil {
			return err
		}
		if sent {
			answer.Reset(p.srv.limits.ackTimeout)
		}
	}
}

// handle applies an ACK or NACK of the message in flight; anything else breaks the protocol.
func (p *session) handle(msg *discoveryv1.ClientMessage) error {
	switch k := msg.GetKind().(type) {
	case *discoveryv1.ClientMessage_Ack:
		return p.ack(k.Ack.GetVersion(), k.Ack.GetNonce())
	case *discoveryv1.ClientMessage_Nack:
		return p.nack(k.Nack.GetVersion(), k.Nack.GetNonce(), k.Nack.GetDetail())
	case *discoveryv1.ClientMessage_Subscribe:
		return deny(ReasonProtocolViolation, "Subscribe sent twice")
	default:
		return deny(ReasonProtocolViolation, "empty client message")
	}
}

func (p *session) answered(version, nonce string) (*inflight, error) {
	f := p.inflight
	if f == nil || f.nonce != nonce || f.snap.Version() != version {
		return nil, deny(ReasonProtocolViolation, "answer for version %q nonce %q, which is not in flight", version, nonce)
	}
	p.srv.inFlight.give(p.id.ID.String(), f.key)
	p.inflight = nil
	return f, nil
}

func (p *session) ack(version, nonce string) error {
	f, err := p.answered(version, nonce)
	if err != nil {
		return err
	}
	p.acked, p.needFull, p.rejected = f.snap, false, ""
	now := p.srv.now()
	p.srv.metrics.acks.Inc()
	p.srv.metrics.ackDelay.Observe(now.Sub(f.primary.CreatedAt()).Seconds())
	p.srv.converge.ack(p, f.primary, p.watch.Snapshot(), now)
	p.answers.update(func(s *ProxyState) { s.Acked, s.Nacked, s.NackDetail, s.InFlight = f.primary.Version(), "", "", "" })
	p.srv.answered(p.scope)
	return nil
}

func (p *session) nack(version, nonce, detail string) error {
	f, err := p.answered(version, nonce)
	if err != nil {
		return err
	}
	p.needFull = true
	if f.full {
		p.rejected = version
	}
	p.srv.metrics.nacks.Inc()
	// The proxy's text reaches status, events and logs: printable and bounded from here on.
	kept := printable.Text(detail, maxAnswerDetail)
	p.answers.update(func(s *ProxyState) { s.Nacked, s.NackDetail, s.InFlight = f.primary.Version(), kept, "" })
	p.srv.answered(p.scope)
	p.srv.log.Info("Proxy rejected snapshot", "nodeID", p.nodeID, "scope", p.scope.String(),
		"version", version, "full", f.full, "detail", kept)
	return nil
}

func (p *session) key() sessionKey { return sessionKey{id: p.id.ID.String(), nodeID: p.nodeID} }

// stillAuthorized asks the authority again before a send, so that content published before a
// revocation reached Reauthorize is never sent to the stream it revokes.
func (p *session) stillAuthorized() error {
	err := p.srv.authorize(p.id, p.scope)
	var d *denial
	if err != nil && errors.As(err, &d) && d.reason == ReasonScopeNotAuthorized {
		return deny(ReasonRevoked, "authorization revoked: %s", d.msg)
	}
	return nil
}

// push sends the latest snapshot when nothing is in flight and the proxy lacks it: in full at
// the start and after a NACK, else as a delta against what the proxy acknowledged. The body is
// the snapshot's shared encoding (cache.Snapshot.Encode); only the nonce is this stream's.
func (p *session) push() (bool, error) {
	primary := p.watch.Snapshot()
	if p.inflight != nil || primary == nil {
		return false, nil
	}
	snap := primary
	if p.inline {
		var err error
		snap, err = primary.Inline(p.srv.limits.maxInlineBytes)
		switch {
		case errors.Is(err, cache.ErrInlineTooLarge):
			return false, deny(ReasonInlineTooLarge, "%v", err)
		case err != nil:
			return false, fmt.Errorf("stream: inline layout of %s: %w", primary.Version(), err)
		}
	}
	if snap.Version() == p.rejected {
		return false, nil
	}
	if !p.needFull && p.acked.Version() == snap.Version() {
		return false, nil
	}
	if p.ctx.Err() != nil {
		return false, context.Cause(p.ctx)
	}
	if err := p.stillAuthorized(); err != nil {
		return false, err
	}
	var base *cache.Snapshot
	kind, key := "full", bodyKey{version: snap.Version()}
	if !p.needFull {
		base, kind, key.base = p.acked, "delta", p.acked.Version()
	}
	body, fresh, err := snap.Encode(base)
	if err != nil {
		return false, err
	}
	if fresh {
		p.srv.metrics.encoded.WithLabelValues(kind).Inc()
	}
	nonce, err := p.nextNonce()
	if err != nil {
		return false, err
	}
	f := newFrame(body, nonce)
	id := p.id.ID.String()
	if !p.srv.inFlight.take(id, key, f.Len()) {
		return false, deny(ReasonTooManyBytesInFlight, "%s has %d bytes of snapshots in flight; %d more would pass its budget",
			id, p.srv.inFlight.inFlight(id), f.Len())
	}
	if err := p.send(f); err != nil {
		p.srv.inFlight.give(id, key)
		return false, err
	}
	p.inflight = &inflight{snap: snap, primary: primary, nonce: nonce, full: p.needFull, size: f.Len(), key: key}
	p.answers.update(func(s *ProxyState) { s.InFlight = primary.Version() })
	p.srv.metrics.sent.WithLabelValues(kind).Inc()
	p.srv.log.V(1).Info("Sent snapshot", "nodeID", p.nodeID, "scope", p.scope.String(), "version", snap.Version(),
		"kind", kind, "bytes", f.Len())
	return true, nil
}

// nextNonce returns the session's next nonce: a counter and random bytes, so that no proxy can
// answer a snapshot it has not received in full (the nonce is the message's last field).
func (p *session) nextNonce() (string, error) {
	var r [8]byte
	if _, err := io.ReadFull(p.srv.entropy, r[:]); err != nil {
		return "", fmt.Errorf("stream: nonce: %w", err)
	}
	p.nonces++
	return strconv.FormatUint(p.nonces, 10) + "-" + hex.EncodeToString(r[:]), nil
}

// send sends f under a watchdog. A send returns only once gRPC's flow control has room, which a
// proxy that does not read never gives; the stream's context ends neither it nor the handler.
// So a send that has not returned within the ACK deadline, or when the session is cancelled
// (Reauthorize, Reverify, expiry, Shutdown), closes the stream's connection, which ends it.
func (p *session) send(f *frame) error {
	var sending atomic.Bool
	sending.Store(true)
	timeout := p.srv.limits.ackTimeout
	timer := time.AfterFunc(timeout, func() {
		p.cancel(deny(ReasonSendTimeout, "snapshot of %d bytes not taken by the proxy within %s", f.Len(), timeout))
	})
	stop := context.AfterFunc(p.ctx, func() {
		if sending.Load() {
			p.closeConnection()
		}
	})
	if p.conn != nil {
		p.sentFrom = p.conn.Written()
	}
	err := p.stream.SendMsg(f)
	sending.Store(false)
	timer.Stop()
	stop()
	if err != nil && p.ctx.Err() != nil {
		return context.Cause(p.ctx)
	}
	return err
}

// release runs when the session has ended. A message the proxy has not read may wait in the
// connection's buffers, and the stream's final status waits behind it: unless the proxy left,
// or a stream of its node on the same connection took over, a message not written out in full
// within flushGrace closes the connection, so that neither stays pinned by a proxy that does
// not read. A proxy that reads gets the status.
func (p *session) release() {
	if p.inflight != nil {
		p.srv.inFlight.give(p.id.ID.String(), p.inflight.key)
	}
	if p.inflight == nil || p.conn == nil || p.stream.Context().Err() != nil {
		return
	}
	if p.srv.supersededOnSameConnection(p) {
		return
	}
	from, size := p.sentFrom, int64(p.inflight.size)
	time.AfterFunc(flushGrace, func() {
		if !p.conn.Closed() && p.conn.Written()-from < size {
			p.srv.log.Info("Closed connection of an unread snapshot", "nodeID", p.nodeID, "scope", p.scope.String(),
				"bytes", size)
			p.closeConnection()
		}
	})
}

// closeConnection closes the session's connection: every stream on it ends, and a send blocked
// in flow control returns.
func (p *session) closeConnection() {
	if p.conn != nil {
		_ = p.conn.Close()
	}
}
