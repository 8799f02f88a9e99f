package state

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// ClusterState is a point-in-time view of every object the translation pipeline reads. Maps are
// keyed by namespace/name; cluster-scoped objects (GatewayClass, Namespace) use an empty
// namespace. The pipeline never mutates the objects it is given.
type ClusterState struct {
	GatewayClasses  map[types.NamespacedName]*gwapiv1.GatewayClass
	Gateways        map[types.NamespacedName]*gwapiv1.Gateway
	HTTPRoutes      map[types.NamespacedName]*gwapiv1.HTTPRoute
	GRPCRoutes      map[types.NamespacedName]*gwapiv1.GRPCRoute
	TLSRoutes       map[types.NamespacedName]*gwapiv1.TLSRoute
	TCPRoutes       map[types.NamespacedName]*gwapiv1.TCPRoute
	UDPRoutes       map[types.NamespacedName]*gwapiv1.UDPRoute
	ReferenceGrants map[types.NamespacedName]*gwapiv1.ReferenceGrant
	// BackendTLSPolicies make the Services they target reached over TLS.
	BackendTLSPolicies map[types.NamespacedName]*gwapiv1.BackendTLSPolicy
	// ConfigMaps hold the CA certificates BackendTLSPolicies reference (key ca.crt).
	ConfigMaps     map[types.NamespacedName]*corev1.ConfigMap
	Services       map[types.NamespacedName]*corev1.Service
	EndpointSlices map[types.NamespacedName]*discoveryv1.EndpointSlice
	// Secrets holds the Secrets a listener may reference; only kubernetes.io/tls ones are used.
	Secrets    map[types.NamespacedName]*corev1.Secret
	Namespaces map[types.NamespacedName]*corev1.Namespace
	// GatewayParameters records which CoxswainGatewayParameters objects exist. Only presence
	// matters to the pipeline (it decides dedicated versus shared scope), so metadata is enough
	// and a metadata-only watch can fill it.
	GatewayParameters map[types.NamespacedName]*metav1.PartialObjectMetadata
	// Deployments are the proxy Deployments (labelled app.kubernetes.io/name=coxswain), whose
	// readiness a Gateway's Programmed condition waits for.
	Deployments map[types.NamespacedName]*appsv1.Deployment

	// ListenerSets add listeners to the Gateways whose allowedListeners admit them.
	ListenerSets map[types.NamespacedName]*gwapiv1.ListenerSet
}

// New returns an empty ClusterState with every map allocated.
func New() *ClusterState {
	return &ClusterState{
		GatewayClasses:     map[types.NamespacedName]*gwapiv1.GatewayClass{},
		Gateways:           map[types.NamespacedName]*gwapiv1.Gateway{},
		HTTPRoutes:         map[types.NamespacedName]*gwapiv1.HTTPRoute{},
		GRPCRoutes:         map[types.NamespacedName]*gwapiv1.GRPCRoute{},
		TLSRoutes:          map[types.NamespacedName]*gwapiv1.TLSRoute{},
		TCPRoutes:          map[types.NamespacedName]*gwapiv1.TCPRoute{},
		UDPRoutes:          map[types.NamespacedName]*gwapiv1.UDPRoute{},
		ReferenceGrants:    map[types.NamespacedName]*gwapiv1.ReferenceGrant{},
		BackendTLSPolicies: map[types.NamespacedName]*gwapiv1.BackendTLSPolicy{},
		ConfigMaps:         map[types.NamespacedName]*corev1.ConfigMap{},
		Services:           map[types.NamespacedName]*corev1.Service{},
		EndpointSlices:     map[types.NamespacedName]*discoveryv1.EndpointSlice{},
		Secrets:            map[types.NamespacedName]*corev1.Secret{},
		Namespaces:         map[types.NamespacedName]*corev1.Namespace{},
		GatewayParameters:  map[types.NamespacedName]*metav1.PartialObjectMetadata{},
		Deployments:        map[types.NamespacedName]*appsv1.Deployment{},
		ListenerSets:       map[types.NamespacedName]*gwapiv1.ListenerSet{},
	}
}

// Key returns the map key of an object.
func Key(obj metav1.Object) types.NamespacedName {
	return types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
}
