package stream

import (
	"cmp"
	"slices"
	"strings"
	"sync"

	"coxswain.dev/coxswain/discovery/server/cache"
)

// maxAnswerDetail bounds the NACK detail kept for ProxyState and logged: enough for a
// validation error, little enough that a proxy cannot make the controller hold (and write to
// status and events) much.
const maxAnswerDetail = 256

// ProxyState is what one live stream's proxy last said about the snapshots it was sent, so that
// the controller can tell which version each proxy of a scope applied.
type ProxyState struct {
	// NodeID and SPIFFEID name the proxy.
	NodeID   string
	SPIFFEID string
	// Acked is the version the proxy last acknowledged (staged, validated and swapped in);
	// empty until its first ACK on this stream.
	Acked string
	// Nacked is the version the proxy last refused, with the detail it gave; empty unless that
	// refusal came after Acked (an ACK clears it).
	Nacked, NackDetail string
	// InFlight is the version sent and not answered yet; empty when none.
	InFlight string
}

// Answered says whether the proxy answered anything on this stream yet.
func (p ProxyState) Answered() bool { return p.Acked != "" || p.Nacked != "" }

// answers is a session's ProxyState, written by its run goroutine and read by Proxies.
type answers struct {
	mu    sync.Mutex
	state ProxyState
}

func (a *answers) update(f func(*ProxyState)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f(&a.state)
}

func (a *answers) get() ProxyState {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state
}

// Proxies returns the state of every live stream of scope on this server, sorted by SPIFFE ID
// and node ID. A stream superseded by a newer one of its node is not listed.
func (s *Server) Proxies(scope cache.Scope) []ProxyState {
	s.mu.Lock()
	sessions := make([]*session, 0, len(s.byScope[scope]))
	for sess := range s.byScope[scope] {
		sessions = append(sessions, sess)
	}
	s.mu.Unlock()
	out := make([]ProxyState, 0, len(sessions))
	for _, sess := range sessions {
		out = append(out, sess.answers.get())
	}
	slices.SortFunc(out, func(a, b ProxyState) int {
		return cmp.Or(strings.Compare(a.SPIFFEID, b.SPIFFEID), strings.Compare(a.NodeID, b.NodeID))
	})
	return out
}

// answered tells Config.OnAnswer that what Proxies returns for scope changed.
func (s *Server) answered(scope cache.Scope) {
	if s.onAnswer != nil {
		s.onAnswer(scope)
	}
}
