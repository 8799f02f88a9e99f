package stream

import (
	"context"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/printable"
	"coxswain.dev/coxswain/discovery/server/cache"
)

// maxNodeIDLength bounds the node ID a proxy may claim; it must also be printable (no control or
// invisible characters), as it is shown in status, events and logs.
const maxNodeIDLength = 253

// received is one result of Recv.
type received struct {
	msg *discoveryv1.ClientMessage
	err error
}

// receive reads the stream in its own goroutine until Recv fails or the stream ends, so that the
// session can wait for client messages, cache changes and cancellation at once.
func receive(stream discoveryv1.Discovery_StreamServer) <-chan received {
	ch := make(chan received)
	go func() {
		for {
			msg, err := stream.Recv()
			select {
			case ch <- received{msg: msg, err: err}:
			case <-stream.Context().Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return ch
}

// sessionKey names a node of one identity: a node ID means something only together with the
// SPIFFE ID that claims it, so no identity can take, or lock out, another's node ID.
type sessionKey struct {
	id     string
	nodeID string
}

// open authorizes a subscription and registers its node; a new stream of the same node of the
// same identity supersedes the old one.
func (s *Server) open(ctx context.Context, id Identity, sub *discoveryv1.Subscribe, stream discoveryv1.Discovery_StreamServer, recv <-chan received) (*session, error) {
	scope, err := cache.ScopeFromProto(sub.GetScope())
	if err != nil {
		return nil, deny(ReasonInvalidSubscribe, "%v", err)
	}
	nodeID := sub.GetNodeId()
	if nodeID == "" || len(nodeID) > maxNodeIDLength || !printable.Clean(nodeID) {
		return nil, deny(ReasonInvalidSubscribe, "node ID must have 1 to %d bytes of UTF-8 without control or invisible characters", maxNodeIDLength)
	}
	if err := s.authorize(id, scope); err != nil {
		return nil, err
	}
	sess := newSession(ctx, s, id, nodeID, scope, stream, recv)
	sess.inline = !sub.GetRouteSets()
	if err := s.register(sess); err != nil {
		sess.cancel(err)
		return nil, err
	}
	sess.watch = s.cache.Watch(scope)
	return sess, nil
}

// register adds sess to the live sessions. It authorizes sess again under the lock that
// Reauthorize takes to list the live sessions, so an authorization withdrawn between open's first
// check and now is seen here or by that Reauthorize, never by neither.
func (s *Server) register(sess *session) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return deny(ReasonShutdown, "server shutting down")
	}
	if err := s.authorize(sess.id, sess.scope); err != nil {
		return err
	}
	key, id := sess.key(), sess.id.ID.String()
	old := s.sessions[key]
	held := s.perIdentity[id]
	if old != nil {
		held--
	}
	if held >= s.limits.perIdentity {
		return deny(ReasonTooManyStreams, "%s already holds %d streams", id, held)
	}
	if old != nil {
		old.cancel(deny(ReasonSuperseded, "a new stream of node %q replaced this one", sess.nodeID))
	}
	if old != nil {
		s.dropFromScope(old)
	}
	s.sessions[key] = sess
	if s.byScope[sess.scope] == nil {
		s.byScope[sess.scope] = make(map[*session]struct{})
	}
	s.byScope[sess.scope][sess] = struct{}{}
	s.perIdentity[id]++
	s.scopeCounts[sess.scope]++
	s.converge.join(sess)
	s.metrics.connected.WithLabelValues(sess.scope.String()).Inc()
	return nil
}

// close unregisters a session that ended and tells OnAnswer, outside the server's lock.
func (s *Server) close(sess *session) {
	s.unregister(sess)
	s.answered(sess.scope)
}

func (s *Server) unregister(sess *session) {
	sess.watch.Cancel()
	sess.cancel(nil)
	s.mu.Lock()
	defer s.mu.Unlock()
	if key := sess.key(); s.sessions[key] == sess {
		delete(s.sessions, key)
	}
	s.dropFromScope(sess)
	if id := sess.id.ID.String(); s.perIdentity[id] > 1 {
		s.perIdentity[id]--
	} else {
		delete(s.perIdentity, id)
	}
	s.converge.leave(sess)
	s.scopeCounts[sess.scope]--
	if s.scopeCounts[sess.scope] > 0 {
		s.metrics.connected.WithLabelValues(sess.scope.String()).Dec()
		return
	}
	delete(s.scopeCounts, sess.scope)
	s.metrics.connected.DeleteLabelValues(sess.scope.String())
}

// dropFromScope removes sess from the sessions Proxies lists; the caller holds s.mu.
func (s *Server) dropFromScope(sess *session) {
	set := s.byScope[sess.scope]
	delete(set, sess)
	if len(set) == 0 {
		delete(s.byScope, sess.scope)
	}
}
