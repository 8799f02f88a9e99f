package graph

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/internal/graph/conditions"
	"coxswain.dev/coxswain/internal/state"
)

const kindListenerSet = "ListenerSet"

// ListenerSet is a ListenerSet whose parentRef names one of our Gateways (GEP-1713). Its
// listeners join the parent's: they are served by the parent's proxies, on the parent's
// addresses, but routes reach them only through a parentRef to the ListenerSet.
type ListenerSet struct {
	Source *gwapiv1.ListenerSet
	// Gateway is the parent Gateway.
	Gateway *Gateway
	// Listeners are the ListenerSet's listeners in spec order; none when the parent does not
	// allow the ListenerSet or is not accepted.
	Listeners []*Listener
	// Accepted is true when the ListenerSet is attached to its parent: the parent allows it and
	// is accepted, and at least one of its listeners is valid.
	Accepted bool
	// Conditions are the ListenerSet-level conditions, final once Build returns.
	Conditions []metav1.Condition
}

// Key returns the ListenerSet's namespace/name.
func (ls *ListenerSet) Key() types.NamespacedName {
	return state.Key(ls.Source)
}

// AllListeners returns the Gateway's own listeners, then the listeners of its attached
// ListenerSets in precedence order: every listener its proxies serve.
func (gw *Gateway) AllListeners() []*Listener {
	if len(gw.listenerSets) == 0 {
		return gw.Listeners
	}
	out := slices.Clone(gw.Listeners)
	for _, ls := range gw.listenerSets {
		out = append(out, ls.Listeners...)
	}
	return out
}

// QualifiedName names the listener uniquely among the listeners of its Gateway: a Gateway
// listener's own name, or "<namespace>/<listenerset>/<name>" for a ListenerSet's, since a
// ListenerSet listener may share its name with a listener of the Gateway or of another set.
func (l *Listener) QualifiedName() string {
	if l.Set == nil {
		return l.Name
	}
	return l.Set.Key().String() + "/" + l.Name
}

// ownerNamespace is the namespace allowedRoutes "Same" means: the ListenerSet's for its
// listeners, the Gateway's for the Gateway's own.
func (l *Listener) ownerNamespace() string {
	if l.Set != nil {
		return l.Set.Source.Namespace
	}
	return l.Gateway.Source.Namespace
}

// buildListenerSets resolves every ListenerSet whose parent is one of our Gateways, in the
// precedence the spec gives (oldest first, then by namespace/name), so that a listener that
// conflicts with the parent's listeners or with those of an earlier ListenerSet loses, and so
// that the caps of ListenerLimits refuse the newer ListenerSets and listeners. It returns them
// sorted by namespace/name.
func (b *builder) buildListenerSets() []*ListenerSet {
	var out []*ListenerSet
	t := &takenListeners{byGateway: map[*Gateway]map[int32][]*Listener{}, namespaces: map[string]int32{}, limits: b.opts.ListenerLimits}
	for _, key := range precedenceOrder(b.cs.ListenerSets) {
		src := b.cs.ListenerSets[key]
		gw, ok := b.gateways[parentGatewayKey(src)]
		if !ok {
			continue
		}
		ls := &ListenerSet{Source: src, Gateway: gw}
		b.listenerSets[key] = ls
		out = append(out, ls)
		if msg := b.listenerSetRefusal(gw, src.Namespace); msg != "" {
			ls.refuse(gwapiv1.ListenerSetReasonNotAllowed, string(gwapiv1.ListenerSetReasonNotAllowed), msg)
			continue
		}
		if gw.acceptedCondition().Status != metav1.ConditionTrue {
			msg := fmt.Sprintf("Gateway %s is not accepted", gw.Key())
			ls.refuse(gwapiv1.ListenerSetReasonParentNotAccepted, conditions.ReasonParentNotProgrammed, msg)
			continue
		}
		if msg := t.setRefusal(gw, src.Namespace); msg != "" {
			reason := conditions.ReasonListenerSetLimitReached
			ls.refuse(gwapiv1.ListenerSetConditionReason(reason), reason, msg)
			continue
		}
		byPort := t.of(gw)
		for _, e := range src.Spec.Listeners {
			l := b.newListener(gw, ls, gwapiv1.Listener(e))
			ls.Listeners = append(ls.Listeners, l)
			if l.Accepted() && t.portFull(byPort, l) {
				continue
			}
			if markSetConflict(byPort[l.Port], l) && l.Accepted() {
				markSetOverlap(byPort[l.Port], l)
				byPort[l.Port] = append(byPort[l.Port], l)
			}
		}
		ls.decide()
		if ls.Accepted {
			gw.listenerSets = append(gw.listenerSets, ls)
			t.namespaces[src.Namespace]++
		}
	}
	slices.SortFunc(out, func(a, b *ListenerSet) int { return compareKeys(a.Key(), b.Key()) })
	return out
}

// takenListeners are the accepted listeners of each Gateway by port, its own and those of its
// ListenerSets resolved so far, and the ListenerSets of each namespace attached so far.
type takenListeners struct {
	byGateway  map[*Gateway]map[int32][]*Listener
	namespaces map[string]int32
	limits     ListenerLimits
}

// of returns the accepted listeners of gw by port, its own to start with.
func (t *takenListeners) of(gw *Gateway) map[int32][]*Listener {
	byPort, ok := t.byGateway[gw]
	if !ok {
		byPort = map[int32][]*Listener{}
		for _, l := range acceptedOf(gw.Listeners) {
			byPort[l.Port] = append(byPort[l.Port], l)
		}
		t.byGateway[gw] = byPort
	}
	return byPort
}

// setRefusal returns why a ListenerSet of namespace ns may not attach to gw: gw, or ns, already
// has as many ListenerSets attached as allowed; "" when it may. The message names no other
// ListenerSet.
func (t *takenListeners) setRefusal(gw *Gateway, ns string) string {
	if n := int32(len(gw.listenerSets)); n >= t.limits.MaxListenerSetsPerGateway { //nolint:gosec // a count of ListenerSets
		return fmt.Sprintf("Gateway %s has %d ListenerSets attached, the most allowed; this one is newer", gw.Key(), n)
	}
	if n := t.namespaces[ns]; n >= t.limits.MaxListenerSetsPerNamespace {
		return fmt.Sprintf("Namespace %s has %d ListenerSets attached to Gateways, the most allowed; this one is newer", ns, n)
	}
	return ""
}

// portFull refuses l when its Gateway's port already has as many accepted listeners as allowed
// (ListenerLimitReached), and reports whether it did.
func (t *takenListeners) portFull(byPort map[int32][]*Listener, l *Listener) bool {
	n := int32(len(byPort[l.Port])) //nolint:gosec // a count of listeners
	if n < t.limits.MaxListenersPerPort {
		return false
	}
	msg := fmt.Sprintf("Port %d of Gateway %s has %d listeners, the most allowed; this one comes later", l.Port, l.Gateway.Key(), n)
	l.accepted, l.programmed = false, false
	for _, c := range conditions.NewListenerLimitReached(msg) {
		l.Conditions = conditions.Upsert(l.Conditions, c)
	}
	return true
}

// precedenceOrder returns the keys of the ListenerSets oldest first, then by namespace/name.
func precedenceOrder(m map[types.NamespacedName]*gwapiv1.ListenerSet) []types.NamespacedName {
	keys := sortedKeys(m)
	slices.SortStableFunc(keys, func(a, b types.NamespacedName) int {
		ta, tb := m[a].CreationTimestamp, m[b].CreationTimestamp
		switch {
		case ta.Before(&tb):
			return -1
		case tb.Before(&ta):
			return 1
		}
		return 0
	})
	return keys
}

func parentGatewayKey(src *gwapiv1.ListenerSet) types.NamespacedName {
	ref := src.Spec.ParentRef
	if (ref.Group != nil && *ref.Group != gwapiv1.GroupName) || (ref.Kind != nil && *ref.Kind != kindGateway) {
		return types.NamespacedName{}
	}
	key := types.NamespacedName{Namespace: src.Namespace, Name: string(ref.Name)}
	if ref.Namespace != nil {
		key.Namespace = string(*ref.Namespace)
	}
	return key
}

// listenerSetRefusal returns why gw's spec.allowedListeners does not admit a ListenerSet of
// namespace ns, or "". Without allowedListeners a Gateway admits none.
func (b *builder) listenerSetRefusal(gw *Gateway, ns string) string {
	from := allowedListenersFrom(gw.Source)
	switch from {
	case gwapiv1.NamespacesFromAll:
		return ""
	case gwapiv1.NamespacesFromSame:
		if ns == gw.Source.Namespace {
			return ""
		}
	case gwapiv1.NamespacesFromSelector:
		sel := labels.Nothing()
		if s := gw.Source.Spec.AllowedListeners.Namespaces.Selector; s != nil {
			if parsed, err := metav1.LabelSelectorAsSelector(s); err == nil {
				sel = parsed
			}
		}
		var set labels.Set
		if obj, ok := b.cs.Namespaces[nsKey(ns)]; ok {
			set = obj.Labels
		}
		if sel.Matches(set) {
			return ""
		}
	}
	return fmt.Sprintf("Gateway %s does not allow ListenerSets from namespace %s (allowedListeners from %s)", gw.Key(), ns, from)
}

// allowedListenersFrom returns spec.allowedListeners.namespaces.from, None when unset.
func allowedListenersFrom(gw *gwapiv1.Gateway) gwapiv1.FromNamespaces {
	al := gw.Spec.AllowedListeners
	if al == nil || al.Namespaces == nil || al.Namespaces.From == nil {
		return gwapiv1.NamespacesFromNone
	}
	return *al.Namespaces.From
}

func acceptedOf(ls []*Listener) []*Listener {
	var out []*Listener
	for _, l := range ls {
		if l.Accepted() {
			out = append(out, l)
		}
	}
	return out
}

// markSetConflict rejects l when a listener that takes precedence (the Gateway's, or an earlier
// ListenerSet's) uses its port with another protocol, or its port, protocol and hostname. It
// reports whether l is free of conflicts. The message names no other listener: a ListenerSet's
// owner may not be allowed to see the Gateway or the other sets.
func markSetConflict(taken []*Listener, l *Listener) bool {
	for _, t := range taken {
		if t.Port != l.Port {
			continue
		}
		if t.Protocol != l.Protocol {
			msg := fmt.Sprintf("Port %d is already used with protocol %s by a listener that takes precedence", l.Port, t.Protocol)
			l.setConflict(conditions.NewListenerProtocolConflict(msg))
			return false
		}
		if t.Hostname == l.Hostname {
			msg := fmt.Sprintf("Hostname %q on port %d is already used by a listener that takes precedence", l.Hostname, l.Port)
			l.setConflict(conditions.NewListenerHostnameConflict(msg))
			return false
		}
	}
	return true
}

// markSetOverlap flags l and the earlier ListenerSet listeners that are HTTPS on its port with
// an overlapping hostname (see markOverlappingTLS). The Gateway's own listeners keep the status
// their Gateway alone gives them.
func markSetOverlap(taken []*Listener, l *Listener) {
	if l.Protocol != gwapiv1.HTTPSProtocolType {
		return
	}
	msg := fmt.Sprintf("Hostname overlaps that of another HTTPS listener on port %d", l.Port)
	for _, t := range taken {
		if t.Protocol != l.Protocol || t.Port != l.Port || t.Hostname == l.Hostname || !overlaps(t.Hostname, l.Hostname) {
			continue
		}
		l.Conditions = conditions.Upsert(l.Conditions, conditions.NewListenerOverlappingHostnames(msg))
		if t.Set != nil {
			t.Conditions = conditions.Upsert(t.Conditions, conditions.NewListenerOverlappingHostnames(msg))
		}
	}
}

// setConflict rejects a ListenerSet listener that lost a conflict; its Programmed condition
// carries the conflict's reason.
func (l *Listener) setConflict(conds []metav1.Condition) {
	l.accepted, l.programmed = false, false
	for _, c := range conds {
		l.Conditions = conditions.Upsert(l.Conditions, c)
	}
	l.Conditions = conditions.Upsert(l.Conditions, conditions.NewListenerConflictNotProgrammed(conds[0].Reason, conds[0].Message))
}

// refuse leaves the ListenerSet unattached for a reason of its own, not of its listeners.
func (ls *ListenerSet) refuse(accepted gwapiv1.ListenerSetConditionReason, programmed, msg string) {
	ls.Accepted = false
	ls.Conditions = []metav1.Condition{
		conditions.NewListenerSetNotAccepted(accepted, msg),
		conditions.NewListenerSetNotProgrammed(programmed, msg),
	}
}

// decide sets the ListenerSet's conditions from its listeners: attached with at least one valid
// (accepted and programmed) listener, refused with none.
func (ls *ListenerSet) decide() {
	var bad []string
	for _, l := range ls.Listeners {
		if !l.Accepted() || !l.Programmed() {
			bad = append(bad, l.Name)
		}
	}
	reason := gwapiv1.ListenerSetReasonListenersNotValid
	switch {
	case len(bad) == len(ls.Listeners):
		ls.refuse(reason, string(reason), "No listener is valid")
	case len(bad) > 0:
		ls.Accepted = true
		ls.Conditions = []metav1.Condition{
			conditions.NewListenerSetAcceptedListenersNotValid("Listeners not valid: " + strings.Join(bad, ", ")),
			conditions.NewListenerSetProgrammed(),
		}
	default:
		ls.Accepted = true
		ls.Conditions = []metav1.Condition{conditions.NewListenerSetAccepted(), conditions.NewListenerSetProgrammed()}
	}
}

// finish stamps the ListenerSet's conditions and its listeners' with its generation.
func (ls *ListenerSet) finish() {
	conditions.Stamp(ls.Conditions, ls.Source.Generation)
	for _, l := range ls.Listeners {
		conditions.Stamp(l.Conditions, ls.Source.Generation)
	}
}

// isListenerSetRef reports whether a route parentRef names a ListenerSet.
func isListenerSetRef(ref gwapiv1.ParentReference) bool {
	return ref.Group != nil && *ref.Group == gwapiv1.GroupName && ref.Kind != nil && *ref.Kind == kindListenerSet
}

// appendSetParent adds a route's parentRef to a ListenerSet of one of our Gateways, once.
func (b *builder) appendSetParent(out []*Parent, seen *[]parentKey, routeNamespace string, ref gwapiv1.ParentReference) []*Parent {
	key := types.NamespacedName{Namespace: routeNamespace, Name: string(ref.Name)}
	if ref.Namespace != nil {
		key.Namespace = string(*ref.Namespace)
	}
	ls, ok := b.listenerSets[key]
	id := parentID(key, ref)
	id.listenerSet = true
	if !ok || slices.Contains(*seen, id) {
		return out
	}
	*seen = append(*seen, id)
	return append(out, &Parent{Ref: ref, Gateway: ls.Gateway, Set: ls})
}

// listeners returns the listeners a parentRef can select: the ListenerSet's when it names an
// attached one, none when it names one that is not attached, else the Gateway's own (a
// Gateway parentRef never reaches a ListenerSet's listeners).
func (p *Parent) listeners() []*Listener {
	switch {
	case p.Set == nil:
		return p.Gateway.Listeners
	case p.Set.Accepted:
		return p.Set.Listeners
	}
	return nil
}

// parentName is how route conditions name the parent: "Gateway ns/name" or "ListenerSet ns/name".
func (p *Parent) parentName() string {
	if p.Set != nil {
		return fmt.Sprintf("%s %s", kindListenerSet, p.Set.Key())
	}
	return fmt.Sprintf("%s %s", kindGateway, p.Gateway.Key())
}

// ListenerSetStatus is the computed status of a ListenerSet whose parent is one of our Gateways.
type ListenerSetStatus struct {
	Namespace string                    `json:"namespace"`
	Name      string                    `json:"name"`
	Status    gwapiv1.ListenerSetStatus `json:"status"`
	// Gateway is the parent, whose Programmed condition the writer's own view of the proxy may
	// still turn False (see status.Writer).
	Gateway types.NamespacedName `json:"-"`
}

func (ls *ListenerSet) status() ListenerSetStatus {
	st := ListenerSetStatus{Namespace: ls.Source.Namespace, Name: ls.Source.Name, Gateway: ls.Gateway.Key()}
	st.Status.Conditions = ls.Conditions
	for _, l := range ls.Listeners {
		st.Status.Listeners = append(st.Status.Listeners, gwapiv1.ListenerEntryStatus(l.status()))
	}
	return st
}

// attachedListenerSets is the Gateway status attachedListenerSets: the number of ListenerSets
// attached, reported only by a Gateway that allows ListenerSets.
func (gw *Gateway) attachedListenerSets() *int32 {
	if allowedListenersFrom(gw.Source) == gwapiv1.NamespacesFromNone {
		return nil
	}
	return ptr(int32(len(gw.listenerSets))) //nolint:gosec // at most the number of ListenerSets in the cluster
}
