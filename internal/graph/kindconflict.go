package graph

import (
	"cmp"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"coxswain.dev/coxswain/internal/graph/conditions"
)

// refuseKindConflicts keeps an HTTPRoute and a GRPCRoute from answering to one hostname on one
// listener. The spec lets an implementation refuse one of the two, and then requires it to keep
// the older route, or the first by "<namespace>/<name>" of routes created in the same second;
// the other loses that listener, and a parentRef of it left with no listener is not accepted
// (HostnameConflict). Serving both would mean routing a request by its content type, merging
// the two kinds, which the spec forbids.
func refuseKindConflicts(gateways []*Gateway, sets []*ListenerSet) {
	lost := map[*HTTPRoute]*HTTPRoute{}
	var order []*HTTPRoute
	refuse := func(ls []*Listener) {
		for _, l := range ls {
			for _, c := range listenerKindConflicts(l) {
				if _, ok := lost[c.loser]; !ok {
					order = append(order, c.loser)
				}
				lost[c.loser] = c.winner
			}
		}
	}
	for _, gw := range gateways {
		refuse(gw.Listeners)
	}
	for _, s := range sets {
		refuse(s.Listeners)
	}
	for _, r := range order {
		for _, p := range r.Parents {
			if !p.Accepted || attachedThrough(r, p) {
				continue
			}
			w := lost[r]
			p.Accepted = false
			p.Conditions = []metav1.Condition{conditions.NewRouteHostnameConflict(fmt.Sprintf(
				"On every listener of %s that the route selects, %s %s is older and answers to one of its hostnames", p.parentName(), w.Kind(), w.Key())), r.refs()}
		}
	}
}

type kindConflict struct{ winner, loser *HTTPRoute }

// listenerKindConflicts removes from l the routes that lose to a route of the other kind and
// returns who lost to whom.
func listenerKindConflicts(l *Listener) []kindConflict {
	if !slices.ContainsFunc(l.Routes, func(a *Attachment) bool { return a.Route.GRPC != nil }) {
		return nil
	}
	var grpc, http []*Attachment
	for _, a := range l.Routes {
		if a.Route.GRPC != nil {
			grpc = append(grpc, a)
		} else {
			http = append(http, a)
		}
	}
	if len(grpc) == 0 || len(http) == 0 {
		return nil
	}
	var out []kindConflict
	losers := map[*HTTPRoute]bool{}
	for _, g := range grpc {
		for _, h := range http {
			if !shareHostname(g.Hostnames, h.Hostnames) {
				continue
			}
			c := kindConflict{winner: g.Route, loser: h.Route}
			if olderRoute(h.Route, g.Route) {
				c = kindConflict{winner: h.Route, loser: g.Route}
			}
			losers[c.loser] = true
			out = append(out, c)
		}
	}
	l.Routes = slices.DeleteFunc(l.Routes, func(a *Attachment) bool { return losers[a.Route] })
	return out
}

// olderRoute reports whether a takes precedence over b as the spec orders conflicting routes:
// creation time, then "<namespace>/<name>".
func olderRoute(a, b *HTTPRoute) bool {
	ta, tb := a.Source.CreationTimestamp, b.Source.CreationTimestamp
	if !ta.Equal(&tb) {
		return ta.Before(&tb)
	}
	return cmp.Compare(a.Key().String(), b.Key().String()) < 0
}

func shareHostname(a, b []AttachedHostname) bool {
	for _, x := range a {
		for _, y := range b {
			if _, ok := IntersectHostname(x.Hostname, y.Hostname); ok {
				return true
			}
		}
	}
	return false
}

// attachedThrough reports whether r is attached to a listener parentRef p selects.
func attachedThrough(r *HTTPRoute, p *Parent) bool {
	for _, l := range selectListeners(p) {
		if slices.ContainsFunc(l.Routes, func(a *Attachment) bool { return a.Route == r }) {
			return true
		}
	}
	return false
}
