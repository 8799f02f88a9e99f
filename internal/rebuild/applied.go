package rebuild

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/stream"
	"coxswain.dev/coxswain/internal/status"
)

// NoStreamsHere is the note of a Gateway whose proxies all stream from other replicas (or not
// at all): their acknowledgements are not seen by the replica that writes status.
const NoStreamsHere = "no proxy of the Gateway streams from the controller replica that writes status, " +
	"so its ready replicas stand for having applied it"

// judge is the verdict on generation gen of a Gateway from the answers of its scope's live
// streams, holds saying whether a version holds that generation. shared says the scope is the
// shared pool, whose snapshot holds every tenant's Gateways: a proxy's error there may be about
// another namespace's Gateway (its name, hostnames, certificate problems), so it is not copied
// into this Gateway's status, which its own tenant reads; the controller's log has it. A stream counts once its proxy
// answered something on it: one that has not (a proxy starting, or reconnecting with the
// snapshot it had) would otherwise turn every reconnect into a Pending. A proxy that refused a
// version holding gen, and acknowledged none since, makes it Refused; any other proxy that has
// not acknowledged such a version makes it Pending; when all have, it is applied.
func judge(gen int64, shared bool, proxies []stream.ProxyState, holds func(version string) bool) status.Applied {
	if len(proxies) == 0 {
		return status.Applied{State: status.AppliedUnknown, Message: NoStreamsHere}
	}
	answered, applied := 0, 0
	var refused *stream.ProxyState
	for i, p := range proxies {
		if !p.Answered() {
			continue
		}
		answered++
		switch {
		case holds(p.Acked):
			applied++
		case refused == nil && p.Nacked != "" && holds(p.Nacked):
			refused = &proxies[i]
		}
	}
	switch {
	case refused != nil && shared:
		return status.Applied{State: status.AppliedRefused, Message: fmt.Sprintf(
			"Proxy %s (%s) of the shared pool refused the snapshot %s holding generation %d and keeps serving the one it had; "+
				"its error may concern another Gateway of the pool and is not shown here: "+
				"the controller's log has it (\"Proxy rejected snapshot\", version %s)",
			refused.NodeID, refused.SPIFFEID, short(refused.Nacked), gen, refused.Nacked)}
	case refused != nil:
		return status.Applied{State: status.AppliedRefused, Message: fmt.Sprintf(
			"Proxy %s (%s) refused the snapshot %s holding generation %d and keeps serving the one it had: %s",
			refused.NodeID, refused.SPIFFEID, short(refused.Nacked), gen, refused.NackDetail)}
	case answered == 0:
		return status.Applied{State: status.AppliedPending, Message: fmt.Sprintf(
			"Waiting for the %d connected proxies to apply generation %d", len(proxies), gen)}
	case applied < answered:
		return status.Applied{State: status.AppliedPending, Message: fmt.Sprintf(
			"Waiting for the proxies to apply generation %d: %d of %d did", gen, applied, answered)}
	default:
		return status.Applied{State: status.AppliedYes}
	}
}

// short is the start of a version, enough to find it in logs.
func short(version string) string {
	if len(version) > 12 {
		return version[:12]
	}
	return version
}

// Applied judges whether the proxies of scope on this replica applied generation gen of the
// Gateway key (of uid); a status.AppliedJudge. Without Proxies it always says AppliedUnknown.
func (p *Pipeline) Applied(scope cache.Scope, key types.NamespacedName, uid types.UID, gen int64) status.Applied {
	if p.Proxies == nil {
		return status.Applied{}
	}
	return judge(gen, scope.Kind == cache.KindSharedPool, p.Proxies(scope), func(version string) bool {
		return p.ledger.holds(scope, version, key, uid, gen)
	})
}

// Answered tells the pipeline that a proxy of scope answered a snapshot, or a stream of it
// opened or closed (stream.Config.OnAnswer): the Gateways of scope (and their ListenerSets) are
// judged again on the latest rebuild's graph so that Programmed follows. It never blocks;
// answers coalesce into one pass per statusAgainInterval, over the scopes that answered.
func (p *Pipeline) Answered(scope cache.Scope) {
	if l := p.status.Load(); l != nil {
		l.again(scope)
	}
}
