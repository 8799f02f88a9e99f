package graph

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"coxswain.dev/coxswain/internal/graph/conditions"
)

// attach decides whether a route attaches to the listeners one parentRef selects, records the
// parent's conditions, and adds the route to those listeners when it is accepted. Attachment
// follows the spec: sectionName and port select listeners, allowedRoutes filter them, and the
// route's hostnames must intersect a listener's. It returns the listeners the route attached to.
func (b *builder) attach(r *HTTPRoute, p *Parent) []listenerAttachment {
	selected := selectListeners(p)
	if len(selected) == 0 {
		p.Conditions = []metav1.Condition{conditions.NewRouteNoMatchingParent(noMatchMessage(p)), r.refs()}
		return nil
	}
	allowed := b.allowedListeners(r, selected)
	if len(allowed) == 0 {
		msg := fmt.Sprintf("No listener of %s allows %ss from namespace %s", p.parentName(), r.Kind(), r.Source.Namespace)
		p.Conditions = []metav1.Condition{conditions.NewRouteNotAllowedByListeners(msg), r.refs()}
		return nil
	}
	hosts := routeHostnames(r)
	attachments := make(map[*Listener][]AttachedHostname, len(allowed))
	for _, l := range allowed {
		if both := IntersectHostnames(l.Hostname, hosts); len(both) > 0 {
			attachments[l] = both
		}
	}
	switch {
	case len(attachments) == 0:
		p.Conditions = []metav1.Condition{conditions.NewRouteNoMatchingListenerHostname(), r.refs()}
	case r.invalid != nil:
		p.Conditions = []metav1.Condition{*r.invalid, r.refs()}
	default:
		p.Accepted = true
		p.Conditions = []metav1.Condition{conditions.NewRouteAccepted(), r.refs()}
		var out []listenerAttachment
		for i, l := range p.listeners() {
			if both, ok := attachments[l]; ok {
				l.addRoute(r, both, nil)
				out = append(out, listenerAttachment{index: i, hostnames: both})
			}
		}
		return out
	}
	return nil
}

func selectListeners(p *Parent) []*Listener {
	var out []*Listener
	for _, l := range p.listeners() {
		if p.Ref.SectionName != nil && string(*p.Ref.SectionName) != l.Name {
			continue
		}
		if p.Ref.Port != nil && *p.Ref.Port != l.Port {
			continue
		}
		out = append(out, l)
	}
	return out
}

func noMatchMessage(p *Parent) string {
	if p.Set != nil && !p.Set.Accepted {
		return fmt.Sprintf("%s is not attached to its Gateway", p.parentName())
	}
	msg := fmt.Sprintf("%s has no listener", p.parentName())
	if p.Ref.SectionName != nil {
		msg += fmt.Sprintf(" named %s", *p.Ref.SectionName)
	}
	if p.Ref.Port != nil {
		msg += fmt.Sprintf(" on port %d", *p.Ref.Port)
	}
	return msg
}

func (b *builder) allowedListeners(r *HTTPRoute, ls []*Listener) []*Listener {
	var out []*Listener
	for _, l := range ls {
		if allowsKind(l, r.Kind()) && b.allowsNamespace(l, r.Source.Namespace) {
			out = append(out, l)
		}
	}
	return out
}

func allowsKind(l *Listener, kind string) bool {
	for _, k := range l.SupportedKinds {
		if string(k.Kind) == kind {
			return true
		}
	}
	return false
}

func routeHostnames(r *HTTPRoute) []string {
	out := make([]string, 0, len(r.Source.Spec.Hostnames))
	for _, h := range r.Source.Spec.Hostnames {
		out = append(out, string(h))
	}
	return out
}

// addRoute attaches a route; a route reaching the listener through two parentRefs counts once.
// a, when not nil, is where the attachment is kept.
func (l *Listener) addRoute(r *HTTPRoute, hostnames []AttachedHostname, a *Attachment) {
	if a == nil {
		a = &Attachment{}
	}
	a.Route, a.Hostnames = r, hostnames
	l.addAttachment(a)
}

// addAttachment attaches a route as a, which is not modified (an attachment an earlier Build
// made of a route it hands on, or one addRoute just filled); a route reaching the listener
// through two parentRefs counts once.
func (l *Listener) addAttachment(a *Attachment) {
	if n := len(l.Routes); n > 0 && l.Routes[n-1].Route == a.Route {
		return
	}
	l.Routes = append(l.Routes, a)
}

// AttachedRoutes is the listener status attachedRoutes count.
func (l *Listener) AttachedRoutes() int32 {
	return int32(len(l.Routes)) //nolint:gosec // at most the number of routes in the cluster
}
