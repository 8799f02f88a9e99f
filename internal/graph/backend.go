package graph

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/internal/graph/conditions"
)

// ClusterKey names a Service port that routes send traffic to.
type ClusterKey struct {
	Namespace string
	Name      string
	Port      int32
}

// String returns "namespace/name:port".
func (k ClusterKey) String() string {
	return k.Namespace + "/" + k.Name + ":" + strconv.Itoa(int(k.Port))
}

// Compare orders cluster keys by namespace, name and port.
func (k ClusterKey) Compare(o ClusterKey) int {
	if c := cmp.Compare(k.Namespace, o.Namespace); c != 0 {
		return c
	}
	if c := cmp.Compare(k.Name, o.Name); c != 0 {
		return c
	}
	return cmp.Compare(k.Port, o.Port)
}

// Backend is one weighted backendRef of a rule.
type Backend struct {
	Cluster ClusterKey
	Weight  int32
	// Valid is false when the reference did not resolve: the spec asks for a 500 answer to the
	// share of requests that would have gone to it.
	Valid bool
	// Filters apply only to the requests this backend gets, after the rule's: header modifiers
	// and URLRewrite only (see backendFilters).
	Filters []Filter
}

func (b *builder) resolveBackends(r *HTTPRoute, refs []gwapiv1.HTTPBackendRef) []Backend {
	out := make([]Backend, 0, len(refs))
	for _, ref := range refs {
		weight := int32(1)
		if ref.Weight != nil {
			weight = *ref.Weight
		}
		backend := b.resolveBackend(r, ref.BackendObjectReference, weight)
		backend.Filters = resolveBackendFilters(ref.Filters)
		out = append(out, backend)
	}
	return out
}

// resolveBackend resolves one reference to a Service port. A failure sets the route's
// ResolvedRefs condition (the first failure wins) and yields an invalid Backend.
func (b *builder) resolveBackend(r *HTTPRoute, ref gwapiv1.BackendObjectReference, weight int32) Backend {
	key, problem := b.resolveServicePort(r.Kind(), r.Source.Namespace, ref)
	if problem != nil {
		if r.resolvedRefs == nil {
			r.resolvedRefs = problem
		}
		return Backend{Cluster: key, Weight: weight}
	}
	b.clusters[key] = true
	if r.GRPC != nil {
		b.grpcClusters[key] = true
	}
	return Backend{Cluster: key, Weight: weight, Valid: true}
}

func (b *builder) resolveServicePort(routeKind, routeNamespace string, ref gwapiv1.BackendObjectReference) (ClusterKey, *metav1.Condition) {
	key := ClusterKey{Namespace: routeNamespace, Name: string(ref.Name), Port: deref(ref.Port)}
	if ref.Namespace != nil {
		key.Namespace = string(*ref.Namespace)
	}
	group, kind := string(deref(ref.Group)), kindService
	if ref.Kind != nil {
		kind = string(*ref.Kind)
	}
	svcKey := types.NamespacedName{Namespace: key.Namespace, Name: key.Name}
	if group != "" || kind != kindService {
		return key, ptr(conditions.NewRouteInvalidKind(fmt.Sprintf("Backend %s is a %s, not a core Service", svcKey, groupKind(group, kind))))
	}
	from := reference{group: gwapiv1.GroupName, kind: routeKind, namespace: routeNamespace}
	if !b.grants.allows(from, reference{kind: kindService, namespace: key.Namespace, name: key.Name}) {
		return key, ptr(conditions.NewRouteRefNotPermitted(fmt.Sprintf("Service %s is in another namespace and no ReferenceGrant allows it", svcKey)))
	}
	svc, ok := b.cs.Services[svcKey]
	if !ok {
		return key, ptr(conditions.NewRouteBackendNotFound(fmt.Sprintf("Service %s not found", svcKey)))
	}
	if ref.Port == nil {
		return key, ptr(conditions.NewRouteBackendNotFound(fmt.Sprintf("Backend %s needs a port", svcKey)))
	}
	if servicePort(svc, key.Port) == nil {
		return key, ptr(conditions.NewRouteBackendNotFound(fmt.Sprintf("Service %s has no port %d", svcKey, key.Port)))
	}
	return key, nil
}

func servicePort(svc *corev1.Service, port int32) *corev1.ServicePort {
	for i := range svc.Spec.Ports {
		if svc.Spec.Ports[i].Port == port {
			return &svc.Spec.Ports[i]
		}
	}
	return nil
}

func nsKey(name string) types.NamespacedName {
	return types.NamespacedName{Name: name}
}

// Cluster is a referenced Service port with its ready endpoints. A cluster without endpoints
// is still programmed: the proxy answers 503 for it.
type Cluster struct {
	Key ClusterKey
	// AppProtocol is the Service port's appProtocol, as written; empty when unset.
	AppProtocol string
	Endpoints   []Endpoint
	// TLS is set when a BackendTLSPolicy selects the Service port: its endpoints are reached
	// over TLS only.
	TLS *BackendTLS
	// GRPC is set when a GRPCRoute uses the Service port: gRPC is HTTP/2, so its endpoints are
	// spoken to over HTTP/2 whatever the port's appProtocol says, by every route that uses it.
	GRPC bool
	// name is Key.String(), made once (see Name).
	name string
}

// Name returns the cluster's name, Key.String().
func (c *Cluster) Name() string {
	if c.name == "" {
		return c.Key.String()
	}
	return c.name
}

// Endpoint is a ready address and target port of a cluster.
type Endpoint struct {
	Address string
	Port    int32
}

func (b *builder) buildClusters() []*Cluster {
	out := make([]*Cluster, 0, len(b.clusters))
	m := b.opts.Routes
	for key := range b.clusters {
		svcKey := types.NamespacedName{Namespace: key.Namespace, Name: key.Name}
		svc := b.cs.Services[svcKey]
		sp := servicePort(svc, key.Port)
		grpc := b.grpcClusters[key]
		policy := b.backendTLS(key, sp)
		if c := m.cluster(b, key, svc, grpc, policy); c != nil {
			out = append(out, c)
			continue
		}
		c := &Cluster{Key: key, AppProtocol: deref(sp.AppProtocol), Endpoints: b.endpoints(key), GRPC: grpc, name: key.String()}
		if policy != nil {
			c.TLS = policy.TLS
		}
		m.keepCluster(b, c, svc, policy)
		out = append(out, c)
	}
	m.sweepClusters()
	slices.SortFunc(out, func(x, y *Cluster) int { return x.Key.Compare(y.Key) })
	return out
}
