package stream

import (
	"context"
	"errors"
	"strconv"
	"time"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/cache"
)

// maxDetailLength bounds how much of a NACK detail is logged.
const maxDetailLength = 256

// session is one subscribed stream. Only its run goroutine touches the push state.
type session struct {
	srv    *Server
	id     Identity
	nodeID string
	scope  cache.Scope
	stream discoveryv1.Discovery_StreamServer
	recv   <-chan received
	watch  *cache.Watch

	ctx    context.Context
	cancel context.CancelCauseFunc

	// acked is what the proxy holds; nil until its first ACK.
	acked *cache.Snapshot
	// inflight is the message awaiting its ACK or NACK; nil when none.
	inflight *inflight
	// needFull asks for a full snapshot: at the start and after a NACK.
	needFull bool
	// rejected is a version whose full snapshot was NACKed; it is not sent again.
	rejected string
	nonces   uint64
}

type inflight struct {
	snap  *cache.Snapshot
	nonce string
	full  bool
}

// newSession derives the session context, which ends with the stream or on cancel.
func newSession(ctx context.Context, s *Server, id Identity, nodeID string, scope cache.Scope,
	stream discoveryv1.Discovery_StreamServer, recv <-chan received,
) *session {
	sctx, cancel := context.WithCancelCause(ctx)
	return &session{
		srv: s, id: id, nodeID: nodeID, scope: scope, stream: stream, recv: recv,
		ctx: sctx, cancel: cancel, needFull: true,
	}
}

// run pushes snapshots until the client leaves, breaks the protocol, leaves a snapshot
// unanswered past the ACK deadline, the session is cancelled or the peer certificate expires.
// One message in flight bounds what a session queues to one snapshot.
func (p *session) run() error {
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
	p.srv.metrics.ackDelay.Observe(now.Sub(f.snap.CreatedAt()).Seconds())
	p.srv.converge.ack(p, f.snap, p.watch.Snapshot(), now)
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
	if len(detail) > maxDetailLength {
		detail = detail[:maxDetailLength]
	}
	p.srv.log.Info("Proxy rejected snapshot", "nodeID", p.nodeID, "scope", p.scope.String(),
		"version", version, "full", f.full, "detail", detail)
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
	snap := p.watch.Snapshot()
	if p.inflight != nil || snap == nil || snap.Version() == p.rejected {
		return false, nil
	}
	if !p.needFull && p.acked.Version() == snap.Version() {
		return false, nil
	}
	if err := p.stillAuthorized(); err != nil {
		return false, err
	}
	var base *cache.Snapshot
	kind := "full"
	if !p.needFull {
		base, kind = p.acked, "delta"
	}
	body, fresh, err := snap.Encode(base)
	if err != nil {
		return false, err
	}
	if fresh {
		p.srv.metrics.encoded.WithLabelValues(kind).Inc()
	}
	p.nonces++
	nonce := strconv.FormatUint(p.nonces, 10)
	f := newFrame(body, nonce)
	if err := p.stream.SendMsg(f); err != nil {
		return false, err
	}
	p.inflight = &inflight{snap: snap, nonce: nonce, full: p.needFull}
	p.srv.metrics.sent.WithLabelValues(kind).Inc()
	p.srv.log.V(1).Info("Sent snapshot", "nodeID", p.nodeID, "scope", p.scope.String(), "version", snap.Version(),
		"kind", kind, "bytes", f.Len())
	return true, nil
}
