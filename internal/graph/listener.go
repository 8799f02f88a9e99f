package graph

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/internal/graph/conditions"
)

const (
	kindHTTPRoute = KindHTTPRoute
	kindGRPCRoute = KindGRPCRoute
	kindTLSRoute  = KindTLSRoute
	kindTCPRoute  = KindTCPRoute
	kindUDPRoute  = KindUDPRoute
	kindGateway   = "Gateway"
	kindSecret    = "Secret"
	kindService   = "Service"
)

// Listener is one listener of a Gateway.
type Listener struct {
	Gateway  *Gateway
	Name     string
	Port     int32
	Protocol gwapiv1.ProtocolType
	// Hostname is the listener hostname, empty for any host.
	Hostname string
	// Certificates are the TLS Secrets of an HTTPS listener or a TLS listener in Terminate
	// mode, in certificateRefs order.
	Certificates []*corev1.Secret
	// ClientValidation is how an HTTPS listener validates client certificates (its Gateway's
	// spec.tls.frontend for its port); nil when it asks for none.
	ClientValidation *FrontendValidation
	// SupportedKinds are the route kinds that may attach.
	SupportedKinds []gwapiv1.RouteGroupKind
	// Routes are the accepted routes attached to this listener, in namespace/name order.
	Routes     []*Attachment
	Conditions []metav1.Condition
	// Set is the ListenerSet the listener comes from; nil for the Gateway's own listeners.
	Set *ListenerSet

	source     gwapiv1.Listener
	accepted   bool
	programmed bool
	namespaces namespaceFilter
}

// Attachment is a route attached to a listener with the hostnames it answers to there.
type Attachment struct {
	Route     *HTTPRoute
	Hostnames []AttachedHostname
}

// Accepted reports whether the listener is valid and not conflicted.
func (l *Listener) Accepted() bool { return l.accepted }

// Programmed reports whether the listener serves traffic.
func (l *Listener) Programmed() bool { return l.programmed }

func (b *builder) buildListeners(gw *Gateway) []*Listener {
	out := make([]*Listener, 0, len(gw.Source.Spec.Listeners))
	for _, src := range gw.Source.Spec.Listeners {
		out = append(out, b.newListener(gw, nil, src))
	}
	markConflicts(out)
	markOverlappingTLS(out)
	return out
}

// newListener builds a listener of gw, from its own spec or, when set is not nil, from that
// ListenerSet's: a ListenerSet listener's certificateRefs default to the set's namespace and
// need ReferenceGrants from ListenerSets (the Gateway's grants are not inherited), while the
// Gateway's client certificate validation (spec.tls.frontend) covers every HTTPS listener it
// serves, its own and its ListenerSets'.
func (b *builder) newListener(gw *Gateway, set *ListenerSet, src gwapiv1.Listener) *Listener {
	l := &Listener{
		Gateway: gw, Set: set, Name: string(src.Name), Port: src.Port, Protocol: src.Protocol,
		source: src, accepted: true, programmed: true,
		Conditions: conditions.NewListenerDefaults(),
	}
	if src.Hostname != nil {
		l.Hostname = string(*src.Hostname)
	}
	switch src.Protocol {
	case gwapiv1.HTTPProtocolType, gwapiv1.HTTPSProtocolType:
	case gwapiv1.TLSProtocolType:
		// Passthrough forwards the connection as the client sent it; Terminate decrypts it with
		// the listener's certificates and forwards the stream. Both route by server name.
	case gwapiv1.TCPProtocolType, gwapiv1.UDPProtocolType:
		// A TCP connection or UDP datagram names no host: the spec has the hostname of such a
		// listener ignored.
		l.Hostname = ""
	default:
		l.reject(conditions.NewListenerUnsupportedProtocol(fmt.Sprintf("Protocol %s is not supported; use HTTP, HTTPS, TLS, TCP or UDP", src.Protocol)))
		return l
	}
	l.resolveKinds()
	b.resolveNamespaces(l)
	if src.Protocol == gwapiv1.HTTPSProtocolType || l.Terminates() {
		from := gatewayReference(gw)
		if set != nil {
			from = reference{group: gwapiv1.GroupName, kind: kindListenerSet, namespace: set.Source.Namespace}
		}
		b.resolveTLS(l, from)
		// spec.tls.frontend validates the clients of HTTPS listeners only.
		if l.accepted && src.Protocol == gwapiv1.HTTPSProtocolType {
			b.resolveFrontendValidation(gw, l)
		}
	}
	return l
}

// Terminates reports whether the listener is a TLS listener in Terminate mode: it decrypts
// connections with its certificates and forwards the stream to its TLSRoutes' backends.
func (l *Listener) Terminates() bool {
	return l.Protocol == gwapiv1.TLSProtocolType && tlsMode(l.source) == gwapiv1.TLSModeTerminate
}

// reject marks the listener not accepted, hence not programmed.
func (l *Listener) reject(c metav1.Condition) {
	l.accepted, l.programmed = false, false
	l.Conditions = conditions.Upsert(l.Conditions, c)
	l.Conditions = conditions.Upsert(l.Conditions, conditions.NewListenerNotProgrammed(c.Message))
}

// unresolved records a reference problem: the listener stays accepted but is not programmed.
func (l *Listener) unresolved(c metav1.Condition) {
	l.programmed = false
	l.Conditions = conditions.Upsert(l.Conditions, c)
	l.Conditions = conditions.Upsert(l.Conditions, conditions.NewListenerNotProgrammed(c.Message))
}

func (l *Listener) resolveKinds() {
	var kinds []gwapiv1.RouteGroupKind
	if l.source.AllowedRoutes != nil {
		kinds = l.source.AllowedRoutes.Kinds
	}
	supported := []string{kindHTTPRoute, kindGRPCRoute}
	switch l.Protocol {
	case gwapiv1.TLSProtocolType:
		supported = []string{kindTLSRoute}
	case gwapiv1.TCPProtocolType:
		supported = []string{kindTCPRoute}
	case gwapiv1.UDPProtocolType:
		supported = []string{kindUDPRoute}
	}
	if len(kinds) == 0 {
		for _, k := range supported {
			l.SupportedKinds = append(l.SupportedKinds, routeKind(k))
		}
		return
	}
	var invalid []string
	for _, k := range kinds {
		if (k.Group == nil || *k.Group == gwapiv1.GroupName) && slices.Contains(supported, string(k.Kind)) {
			if !slices.ContainsFunc(l.SupportedKinds, func(s gwapiv1.RouteGroupKind) bool { return s.Kind == k.Kind }) {
				l.SupportedKinds = append(l.SupportedKinds, routeKind(string(k.Kind)))
			}
			continue
		}
		invalid = append(invalid, string(k.Kind))
	}
	if len(invalid) > 0 {
		l.Conditions = conditions.Upsert(l.Conditions, conditions.NewListenerInvalidRouteKinds(fmt.Sprintf("Unsupported route kinds %v", invalid)))
	}
	if len(l.SupportedKinds) == 0 {
		l.unresolved(conditions.NewListenerInvalidRouteKinds(fmt.Sprintf("No supported route kind in %v", invalid)))
	}
}

// tlsMode returns the TLS mode of a listener: the CRD's default, Terminate, when unset.
func tlsMode(src gwapiv1.Listener) gwapiv1.TLSModeType {
	if src.TLS == nil || src.TLS.Mode == nil {
		return gwapiv1.TLSModeTerminate
	}
	return *src.TLS.Mode
}

// routeKind returns the Gateway API group's route kind named kind.
func routeKind(kind string) gwapiv1.RouteGroupKind {
	return gwapiv1.RouteGroupKind{Group: ptr(gwapiv1.Group(gwapiv1.GroupName)), Kind: gwapiv1.Kind(kind)}
}

// finish stamps the conditions and turns Programmed off when the Gateway is not accepted.
func (l *Listener) finish(gatewayAccepted bool) {
	if !gatewayAccepted && l.programmed {
		l.programmed = false
		l.Conditions = conditions.Upsert(l.Conditions, conditions.NewListenerNotProgrammed("Gateway is not accepted"))
	}
	conditions.Stamp(l.Conditions, l.Gateway.Source.Generation)
}

// namespaceFilter is a listener's allowedRoutes.namespaces.
type namespaceFilter struct {
	from     gwapiv1.FromNamespaces
	selector labels.Selector
}

func (b *builder) resolveNamespaces(l *Listener) {
	l.namespaces.from = gwapiv1.NamespacesFromSame
	ar := l.source.AllowedRoutes
	if ar == nil || ar.Namespaces == nil || ar.Namespaces.From == nil {
		return
	}
	l.namespaces.from = *ar.Namespaces.From
	if l.namespaces.from != gwapiv1.NamespacesFromSelector {
		return
	}
	sel := labels.Nothing()
	var err error
	if ar.Namespaces.Selector != nil {
		sel, err = metav1.LabelSelectorAsSelector(ar.Namespaces.Selector)
	}
	if err != nil {
		l.reject(conditions.NewListenerUnsupportedValue(fmt.Sprintf("Invalid allowedRoutes namespace selector: %v", err)))
		sel = labels.Nothing()
	}
	l.namespaces.selector = sel
}

// allowsNamespace reports whether a route in namespace ns may attach to the listener.
func (b *builder) allowsNamespace(l *Listener, ns string) bool {
	switch l.namespaces.from {
	case gwapiv1.NamespacesFromAll:
		return true
	case gwapiv1.NamespacesFromSelector:
		var set labels.Set
		if obj, ok := b.cs.Namespaces[nsKey(ns)]; ok {
			set = obj.Labels
		}
		return l.namespaces.selector.Matches(set)
	case gwapiv1.NamespacesFromSame:
		return ns == l.ownerNamespace()
	}
	return false
}
