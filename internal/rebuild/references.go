package rebuild

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/state"
)

// References are the Services, Secrets and ConfigMaps whose changes can change what a rebuild
// produces. Any other Service, EndpointSlice, Secret or ConfigMap may change without a rebuild:
// in a real cluster most of them belong to workloads no route reaches, and their churn
// (endpoints above all) would otherwise rebuild everything.
//
// The set is a superset, computed from the cluster state without resolving anything, so it never
// misses a reference the graph would follow: every backendRef and mirror backendRef of every
// HTTPRoute, whichever Gateway it names and whether or not that Service exists yet (its
// creation must resolve the route); every certificateRef of every Gateway and ListenerSet
// listener and every Gateway's backend clientCertificateRef; every ConfigMap caCertificateRef of
// every BackendTLSPolicy and of every Gateway's spec.tls.frontend; and the proxies' own Services
// (labelled ProxyLabel=ProxyLabelValue, or annotated as a shared pool
// Gateway's), which give Gateways their addresses and record the shared pool's internal ports.
type References struct {
	services   map[types.NamespacedName]bool
	secrets    map[types.NamespacedName]bool
	configMaps map[types.NamespacedName]bool
}

// ReferencesOf returns the References of cs.
func ReferencesOf(cs *state.ClusterState) References {
	refs := referencesBesidesHTTPRoutes(cs)
	for key, route := range cs.HTTPRoutes {
		refs.addRoute(key.Namespace, route)
	}
	return refs
}

// referencesBesidesHTTPRoutes returns the References of cs but those of its HTTPRoutes.
func referencesBesidesHTTPRoutes(cs *state.ClusterState) References {
	refs := References{
		services:   map[types.NamespacedName]bool{},
		secrets:    map[types.NamespacedName]bool{},
		configMaps: map[types.NamespacedName]bool{},
	}
	for key, route := range cs.GRPCRoutes {
		refs.addGRPCRoute(key.Namespace, route)
	}
	for key, route := range cs.TLSRoutes {
		for i := range route.Spec.Rules {
			refs.addBackendRefs(key.Namespace, route.Spec.Rules[i].BackendRefs)
		}
	}
	for key, route := range cs.TCPRoutes {
		for i := range route.Spec.Rules {
			refs.addBackendRefs(key.Namespace, route.Spec.Rules[i].BackendRefs)
		}
	}
	for key, route := range cs.UDPRoutes {
		for i := range route.Spec.Rules {
			refs.addBackendRefs(key.Namespace, route.Spec.Rules[i].BackendRefs)
		}
	}
	for key, gw := range cs.Gateways {
		if gw.Spec.TLS != nil && gw.Spec.TLS.Backend != nil {
			if ref := gw.Spec.TLS.Backend.ClientCertificateRef; ref != nil {
				refs.secrets[types.NamespacedName{Namespace: namespaceOr(ref.Namespace, key.Namespace), Name: string(ref.Name)}] = true
			}
		}
		refs.addFrontendCAs(key.Namespace, gw.Spec.TLS)
		for _, l := range gw.Spec.Listeners {
			if l.TLS == nil {
				continue
			}
			for _, ref := range l.TLS.CertificateRefs {
				if (ref.Group == nil || *ref.Group == "") && (ref.Kind == nil || *ref.Kind == "Secret") {
					refs.secrets[types.NamespacedName{Namespace: namespaceOr(ref.Namespace, key.Namespace), Name: string(ref.Name)}] = true
				}
			}
		}
	}
	for key, ls := range cs.ListenerSets {
		for _, l := range ls.Spec.Listeners {
			if l.TLS == nil {
				continue
			}
			for _, ref := range l.TLS.CertificateRefs {
				if (ref.Group == nil || *ref.Group == "") && (ref.Kind == nil || *ref.Kind == "Secret") {
					refs.secrets[types.NamespacedName{Namespace: namespaceOr(ref.Namespace, key.Namespace), Name: string(ref.Name)}] = true
				}
			}
		}
	}
	for key, p := range cs.BackendTLSPolicies {
		for _, ref := range p.Spec.Validation.CACertificateRefs {
			if ref.Group == "" && ref.Kind == "ConfigMap" {
				refs.configMaps[types.NamespacedName{Namespace: key.Namespace, Name: string(ref.Name)}] = true
			}
		}
	}
	return refs
}

// addFrontendCAs adds the ConfigMap caCertificateRefs of a Gateway's spec.tls.frontend.
func (r References) addFrontendCAs(namespace string, cfg *gwapiv1.GatewayTLSConfig) {
	if cfg == nil || cfg.Frontend == nil {
		return
	}
	validations := []*gwapiv1.FrontendTLSValidation{cfg.Frontend.Default.Validation}
	for _, pp := range cfg.Frontend.PerPort {
		validations = append(validations, pp.TLS.Validation)
	}
	for _, v := range validations {
		if v == nil {
			continue
		}
		for _, ref := range v.CACertificateRefs {
			if ref.Group == "" && ref.Kind == "ConfigMap" {
				r.configMaps[types.NamespacedName{Namespace: namespaceOr(ref.Namespace, namespace), Name: string(ref.Name)}] = true
			}
		}
	}
}

// isProxyService reports whether svc is a proxy's own Service, which matters by what it is,
// whether or not the state knew it: its creation gives a Gateway its address.
func isProxyService(svc *corev1.Service) bool {
	return svc.Labels[ProxyLabel] == ProxyLabelValue || svc.Annotations[graph.SharedServiceGatewayAnnotation] != ""
}

// addRoute adds the Services of every backendRef and mirror of an HTTPRoute.
func (r References) addRoute(namespace string, route *gwapiv1.HTTPRoute) {
	for i := range route.Spec.Rules {
		rule := &route.Spec.Rules[i]
		r.addFilters(namespace, rule.Filters)
		for j := range rule.BackendRefs {
			r.addService(namespace, rule.BackendRefs[j].BackendObjectReference)
			r.addFilters(namespace, rule.BackendRefs[j].Filters)
		}
	}
}

// addBackendRefs adds the Services of backendRefs.
func (r References) addBackendRefs(namespace string, refs []gwapiv1.BackendRef) {
	for i := range refs {
		r.addService(namespace, refs[i].BackendObjectReference)
	}
}

// addGRPCRoute adds the Services of every backendRef and mirror of a GRPCRoute.
func (r References) addGRPCRoute(namespace string, route *gwapiv1.GRPCRoute) {
	mirrors := func(filters []gwapiv1.GRPCRouteFilter) {
		for _, f := range filters {
			if f.RequestMirror != nil {
				r.addService(namespace, f.RequestMirror.BackendRef)
			}
		}
	}
	for i := range route.Spec.Rules {
		rule := &route.Spec.Rules[i]
		mirrors(rule.Filters)
		for j := range rule.BackendRefs {
			r.addService(namespace, rule.BackendRefs[j].BackendObjectReference)
			mirrors(rule.BackendRefs[j].Filters)
		}
	}
}

func (r References) addFilters(namespace string, filters []gwapiv1.HTTPRouteFilter) {
	for _, f := range filters {
		if f.RequestMirror != nil {
			r.addService(namespace, f.RequestMirror.BackendRef)
		}
	}
}

func (r References) addService(namespace string, ref gwapiv1.BackendObjectReference) {
	if (ref.Group == nil || *ref.Group == "") && (ref.Kind == nil || *ref.Kind == "Service") {
		r.services[types.NamespacedName{Namespace: namespaceOr(ref.Namespace, namespace), Name: string(ref.Name)}] = true
	}
}

func namespaceOr(ns *gwapiv1.Namespace, def string) string {
	if ns == nil || *ns == "" {
		return def
	}
	return string(*ns)
}

// Matters reports whether a change of obj can change what a rebuild produces. Kinds other than
// Service, EndpointSlice, Secret and ConfigMap always matter.
func (r References) Matters(obj any) bool {
	switch o := obj.(type) {
	case *corev1.Service:
		return r.services[state.Key(o)] || isProxyService(o)
	case *discoveryv1.EndpointSlice:
		return r.services[types.NamespacedName{Namespace: o.Namespace, Name: o.Labels[discoveryv1.LabelServiceName]}]
	case *corev1.Secret:
		return r.secrets[state.Key(o)]
	case *corev1.ConfigMap:
		return r.configMaps[state.Key(o)]
	}
	return true
}

// ReferenceFilter holds the References of the latest Load, for event handlers that run
// meanwhile. While a Load is in progress every change matters: a change that lands in the cache
// after Load read it, and is judged before the new References are in place, must not be lost.
//
// The Services of the HTTPRoutes, which may number thousands, are kept from one Load to the
// next: only the routes that are new, gone or another object than last time are read again,
// and each Service counts the routes that name it.
type ReferenceFilter struct {
	mu      sync.Mutex
	loading int
	known   bool
	refs    References
	// routeServices counts, for every Service, the HTTPRoutes of the latest Load that name it.
	routeServices map[types.NamespacedName]int

	// routes are the HTTPRoutes of the latest Load with the Services each names; only Loaded
	// uses them.
	routes map[types.NamespacedName]routeRefs
}

type routeRefs struct {
	route    *gwapiv1.HTTPRoute
	services []types.NamespacedName
}

// BeginLoad marks a Load as started. Call Loaded with its state, or Loaded(nil) if it failed.
func (f *ReferenceFilter) BeginLoad() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loading++
}

// Loaded ends a Load and, when cs is not nil, replaces the References with cs's. Calls of
// Loaded must not overlap.
func (f *ReferenceFilter) Loaded(cs *state.ClusterState) {
	var refs References
	var delta map[types.NamespacedName]int
	if cs != nil {
		refs = referencesBesidesHTTPRoutes(cs)
		delta = f.routeDelta(cs.HTTPRoutes)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loading--
	if cs == nil {
		return
	}
	if f.routeServices == nil {
		f.routeServices = map[types.NamespacedName]int{}
	}
	for svc, n := range delta {
		if f.routeServices[svc] += n; f.routeServices[svc] <= 0 {
			delete(f.routeServices, svc)
		}
	}
	f.refs, f.known = refs, true
}

// routeDelta brings f.routes to routes and returns how the count of routes naming each Service
// changed.
func (f *ReferenceFilter) routeDelta(routes map[types.NamespacedName]*gwapiv1.HTTPRoute) map[types.NamespacedName]int {
	if f.routes == nil {
		f.routes = make(map[types.NamespacedName]routeRefs, len(routes))
	}
	delta := map[types.NamespacedName]int{}
	for key, r := range routes {
		old, ok := f.routes[key]
		if ok && old.route == r {
			continue
		}
		for _, svc := range old.services {
			delta[svc]--
		}
		cur := routeRefs{route: r, services: routeServicesOf(key.Namespace, r)}
		for _, svc := range cur.services {
			delta[svc]++
		}
		f.routes[key] = cur
	}
	if len(f.routes) > len(routes) {
		for key, old := range f.routes {
			if _, ok := routes[key]; ok {
				continue
			}
			for _, svc := range old.services {
				delta[svc]--
			}
			delete(f.routes, key)
		}
	}
	return delta
}

// routeServicesOf returns the Services an HTTPRoute names, each once.
func routeServicesOf(namespace string, r *gwapiv1.HTTPRoute) []types.NamespacedName {
	refs := References{services: map[types.NamespacedName]bool{}}
	refs.addRoute(namespace, r)
	out := make([]types.NamespacedName, 0, len(refs.services))
	for svc := range refs.services {
		out = append(out, svc)
	}
	return out
}

// Matters reports whether a change of obj (the object before or after it) needs a rebuild.
// Before the first Load everything matters.
func (f *ReferenceFilter) Matters(obj any) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.loading > 0 || !f.known {
		return true
	}
	var svc types.NamespacedName
	switch o := obj.(type) {
	case *corev1.Service:
		svc = state.Key(o)
	case *discoveryv1.EndpointSlice:
		svc = types.NamespacedName{Namespace: o.Namespace, Name: o.Labels[discoveryv1.LabelServiceName]}
	default:
		return f.refs.Matters(obj)
	}
	return f.routeServices[svc] > 0 || f.refs.Matters(obj)
}
