package graph

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/pkg/consts"

	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/state"
)

// Options tune Build. The zero value serves wellknown.GatewayControllerName.
type Options struct {
	// ControllerName selects the GatewayClasses we serve.
	ControllerName gwapiv1.GatewayController
	// CRDBundleVersion is the gateway.networking.k8s.io/bundle-version annotation found on the
	// installed Gateway API CRDs. Empty means the caller did not look, and the version this
	// binary is built against is assumed.
	CRDBundleVersion string
	// CRDChannel is the gateway.networking.k8s.io/channel annotation of the installed Gateway
	// API CRDs: "experimental" adds the features that need experimental fields to the
	// GatewayClass supportedFeatures. Empty means standard.
	CRDChannel string
	// Namespace is the operator's namespace, which holds the shared pool and the Services of its
	// Gateways; wellknown.InstallNamespace when empty.
	Namespace string
	// TrustAnyEndpointSlice takes the endpoints of every EndpointSlice of a Service, whoever
	// wrote it. When false (the default) only the endpoints of a slice the EndpointSlice
	// controller manages for a Service with a selector, or whose targetRef is a Pod of the
	// Service's namespace, are used. Loopback, link-local, unspecified and multicast addresses
	// are refused either way.
	TrustAnyEndpointSlice bool
	// MaxSharedGatewaysPerNamespace caps the shared pool Gateways of one namespace: the oldest
	// are accepted, the others are not (NamespaceLimitReached).
	// wellknown.DefaultMaxSharedGatewaysPerNamespace when zero.
	MaxSharedGatewaysPerNamespace int32
	// MaxSharedPortsPerNamespace caps the shared pool's internal ports the Gateways of one
	// namespace hold together; a listener port beyond it gets none and its listener is not
	// programmed (PortsExhausted). wellknown.DefaultMaxSharedPortsPerNamespace when zero.
	MaxSharedPortsPerNamespace int32
	// ListenerLimits cap the listeners ListenerSets add to Gateways.
	ListenerLimits
	// MaxRouteBytesPerNamespace caps the encoded bytes the routes of one namespace take of one
	// scope's snapshot, every copy counted; a route beyond it is not accepted on that scope's
	// Gateways (SnapshotSizeLimitReached). wellknown.DefaultMaxRouteBytesPerNamespace when zero.
	MaxRouteBytesPerNamespace int64
	// Routes, when set, keeps what Build resolved of the HTTPRoutes, their rules and their
	// attachments, from one Build to the next (see RouteMemo).
	Routes *RouteMemo
}

func (o Options) withDefaults() Options {
	if o.ControllerName == "" {
		o.ControllerName = wellknown.GatewayControllerName
	}
	if o.CRDBundleVersion == "" {
		o.CRDBundleVersion = consts.BundleVersion
	}
	if o.Namespace == "" {
		o.Namespace = wellknown.InstallNamespace
	}
	if o.MaxSharedGatewaysPerNamespace == 0 {
		o.MaxSharedGatewaysPerNamespace = wellknown.DefaultMaxSharedGatewaysPerNamespace
	}
	if o.MaxSharedPortsPerNamespace == 0 {
		o.MaxSharedPortsPerNamespace = wellknown.DefaultMaxSharedPortsPerNamespace
	}
	o.ListenerLimits = o.ListenerLimits.withDefaults()
	if o.MaxRouteBytesPerNamespace == 0 {
		o.MaxRouteBytesPerNamespace = wellknown.DefaultMaxRouteBytesPerNamespace
	}
	return o
}

// ListenerLimits cap the listeners ListenerSets add to Gateways, the older first, so that a
// newcomer never displaces what already serves. Each is its wellknown default when zero.
type ListenerLimits struct {
	// MaxListenersPerPort caps the accepted listeners of one Gateway port, the Gateway's own
	// first: a ListenerSet listener beyond is not accepted (ListenerLimitReached).
	MaxListenersPerPort int32
	// MaxListenerSetsPerGateway caps the ListenerSets attached to one Gateway, and
	// MaxListenerSetsPerNamespace those of one namespace attached to any of our Gateways: a
	// ListenerSet beyond either is not accepted (ListenerSetLimitReached).
	MaxListenerSetsPerGateway   int32
	MaxListenerSetsPerNamespace int32
}

func (l ListenerLimits) withDefaults() ListenerLimits {
	if l.MaxListenersPerPort == 0 {
		l.MaxListenersPerPort = wellknown.DefaultMaxListenersPerPort
	}
	if l.MaxListenerSetsPerGateway == 0 {
		l.MaxListenerSetsPerGateway = wellknown.DefaultMaxListenerSetsPerGateway
	}
	if l.MaxListenerSetsPerNamespace == 0 {
		l.MaxListenerSetsPerNamespace = wellknown.DefaultMaxListenerSetsPerNamespace
	}
	return l
}

// Graph is the resolved view of the Gateway API objects that Coxswain serves. Slices are sorted
// by name (namespace/name for namespaced objects).
type Graph struct {
	// ControllerName is the controllerName of the classes in the graph.
	ControllerName gwapiv1.GatewayController
	// GatewayClasses are the classes whose controllerName is ours.
	GatewayClasses []*GatewayClass
	// Gateways are the Gateways of our classes.
	Gateways []*Gateway
	// HTTPRoutes are the routes with at least one parentRef to one of our Gateways.
	HTTPRoutes []*HTTPRoute
	// GRPCRoutes are the GRPCRoutes with at least one parentRef to one of our Gateways, each
	// resolved as an HTTPRoute (HTTPRoute.GRPC holds the GRPCRoute).
	GRPCRoutes []*HTTPRoute
	// TLSRoutes are the TLSRoutes with at least one parentRef to one of our Gateways, each
	// resolved as an HTTPRoute (HTTPRoute.TLS holds the TLSRoute).
	TLSRoutes []*HTTPRoute
	// TCPRoutes are the TCPRoutes with at least one parentRef to one of our Gateways, each
	// resolved as an HTTPRoute (HTTPRoute.TCP holds the TCPRoute).
	TCPRoutes []*HTTPRoute
	// UDPRoutes are the UDPRoutes with at least one parentRef to one of our Gateways, each
	// resolved as an HTTPRoute (HTTPRoute.UDP holds the UDPRoute).
	UDPRoutes []*HTTPRoute
	// Clusters are the Service ports that attached routes reference, with their ready endpoints.
	Clusters []*Cluster
	// BackendTLSPolicies are every BackendTLSPolicy, with the Gateways they report to.
	BackendTLSPolicies []*BackendTLSPolicy
	// ListenerSets are the ListenerSets whose parent is one of our Gateways.
	ListenerSets []*ListenerSet
	// SizeRefusals are the routes refused on the Gateways of a scope because the scope's
	// snapshot could not hold them (SnapshotSizeLimitReached), sorted by scope and route.
	SizeRefusals []SizeRefusal
}

// Build resolves the cluster state into a Graph. It never fails: a user's mistake becomes a
// status condition on the object that holds it.
func Build(cs *state.ClusterState, opts Options) *Graph {
	b := newBuilder(cs, opts.withDefaults())
	g := &Graph{ControllerName: b.opts.ControllerName}
	g.GatewayClasses = b.buildGatewayClasses()
	g.Gateways = b.buildGateways()
	refuseProxyNameConflicts(g.Gateways)
	refuseOverNamespaceLimit(g.Gateways, b.opts.MaxSharedGatewaysPerNamespace)
	g.ListenerSets = b.buildListenerSets()
	g.HTTPRoutes = b.buildHTTPRoutes()
	g.GRPCRoutes = b.buildGRPCRoutes()
	g.TLSRoutes = b.buildTLSRoutes()
	g.TCPRoutes = b.buildTCPRoutes()
	g.UDPRoutes = b.buildUDPRoutes()
	refuseKindConflicts(g.Gateways, g.ListenerSets)
	stampRoutes(g.HTTPRoutes)
	stampRoutes(g.GRPCRoutes)
	stampRoutes(g.TLSRoutes)
	stampRoutes(g.TCPRoutes)
	stampRoutes(g.UDPRoutes)
	for _, gw := range g.Gateways {
		gw.finish()
	}
	for _, ls := range g.ListenerSets {
		ls.finish()
	}
	allocateSharedPorts(g.Gateways, b.cs.Services, b.opts.Namespace, b.opts.MaxSharedPortsPerNamespace)
	g.SizeRefusals = boundScopeSizes(g, b.opts.MaxRouteBytesPerNamespace)
	g.BackendTLSPolicies = b.buildBackendTLSPolicies()
	g.Clusters = b.buildClusters()
	recordAncestors(g.Gateways, g.BackendTLSPolicies, b.cs.Services)
	return g
}

// builder carries the inputs and indexes shared by the build steps.
type builder struct {
	cs       *state.ClusterState
	opts     Options
	grants   refGrants
	classes  map[string]*GatewayClass
	gateways map[types.NamespacedName]*Gateway
	// gatewayList holds the gateways in key order, which a RouteMemo's parents index.
	gatewayList []*Gateway
	slices      map[types.NamespacedName][]types.NamespacedName
	clusters    map[ClusterKey]bool
	// grpcClusters are the clusters GRPCRoutes use.
	grpcClusters map[ClusterKey]bool
	keyPairs     map[types.NamespacedName]string
	// policies maps each BackendTLSPolicy target to the policy that wins it.
	policies map[policyTarget]*BackendTLSPolicy
	// listenerSets are the ListenerSets whose parent is one of our Gateways.
	listenerSets map[types.NamespacedName]*ListenerSet
}

func newBuilder(cs *state.ClusterState, opts Options) *builder {
	used := 0
	if opts.Routes != nil {
		used = len(opts.Routes.clusterUses) // about as many clusters as the last Build used
	}
	return &builder{
		cs:       cs,
		opts:     opts,
		grants:   newRefGrants(cs.ReferenceGrants),
		classes:  map[string]*GatewayClass{},
		gateways: map[types.NamespacedName]*Gateway{},
		slices:   indexEndpointSlices(cs),
		clusters: make(map[ClusterKey]bool, used),
		keyPairs: map[types.NamespacedName]string{},
		policies: map[policyTarget]*BackendTLSPolicy{},

		listenerSets: map[types.NamespacedName]*ListenerSet{},
		grpcClusters: map[ClusterKey]bool{},
	}
}

// sortedKeys returns the keys of a state map in namespace/name order.
func sortedKeys[V any](m map[types.NamespacedName]V) []types.NamespacedName {
	keys := make([]types.NamespacedName, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)
	return keys
}

func compareKeys(a, b types.NamespacedName) int {
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}
