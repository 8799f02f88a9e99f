package rebuild

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/internal/state"
)

// BundleVersionAnnotation is the annotation of the Gateway API CRDs that names their release.
const BundleVersionAnnotation = "gateway.networking.k8s.io/bundle-version"

// ChannelAnnotation is the annotation of the Gateway API CRDs that names their channel
// (standard or experimental).
const ChannelAnnotation = "gateway.networking.k8s.io/channel"

// ProxyLabel and ProxyLabelValue mark the proxy Deployments (dedicated and shared) that Load
// keeps.
const (
	ProxyLabel      = "app.kubernetes.io/name"
	ProxyLabelValue = "coxswain"
)

// GatewayClassCRDName is the CRD whose bundle version the GatewayClass SupportedVersion
// condition reports.
const GatewayClassCRDName = "gatewayclasses.gateway.networking.k8s.io"

// Input is what one rebuild reads.
type Input struct {
	State *state.ClusterState
	// CRDBundleVersion is the bundle version of the installed Gateway API CRDs, empty when unknown.
	CRDBundleVersion string
	// CRDChannel is the channel of the installed Gateway API CRDs, empty when unknown.
	CRDChannel string
	// ChangedAt is when the earliest object change this rebuild handles was seen, zero when
	// unknown; the snapshots it publishes carry it, so that the stream server can time each
	// version from that change to its last proxy's ACK.
	ChangedAt time.Time
}

// GatewayParametersGVK and CRDGVK are the metadata-only kinds Load reads.
var (
	GatewayParametersGVK = schema.GroupVersionKind{Group: state.GatewayParametersGroup, Version: "v1alpha1", Kind: state.GatewayParametersKind}
	CRDGVK               = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}
)

// Load reads every object the pipeline uses from r, meant to be the informer cache. It does not
// copy them: the pipeline never mutates its input, and whoever writes must copy first. Only
// kubernetes.io/tls Secrets are kept.
//
// When r is the manager's cache itself (mgr.GetCache(), which gives each kind's informer), the
// typed objects are taken from the informers' stores as they are, the very objects the cache
// holds: a List would copy every object into a list item first, which with thousands of routes
// is a large part of a rebuild. The same object then keeps its pointer from one rebuild to the
// next until the API server changes it. Other readers are listed.
func Load(ctx context.Context, r client.Reader) (Input, error) {
	cs := state.New()
	var params metav1.PartialObjectMetadataList
	params.SetGroupVersionKind(GatewayParametersGVK.GroupVersion().WithKind(GatewayParametersGVK.Kind + "List"))
	proxies := map[types.NamespacedName]*appsv1.Deployment{}
	secrets := map[types.NamespacedName]*corev1.Secret{}
	for _, err := range []error{
		loadInto(ctx, r, cs.GatewayClasses, &gwapiv1.GatewayClassList{}),
		loadInto(ctx, r, cs.Gateways, &gwapiv1.GatewayList{}),
		loadInto(ctx, r, cs.HTTPRoutes, &gwapiv1.HTTPRouteList{}),
		loadInto(ctx, r, cs.GRPCRoutes, &gwapiv1.GRPCRouteList{}),
		loadInto(ctx, r, cs.TLSRoutes, &gwapiv1.TLSRouteList{}),
		loadInto(ctx, r, cs.TCPRoutes, &gwapiv1.TCPRouteList{}),
		loadInto(ctx, r, cs.UDPRoutes, &gwapiv1.UDPRouteList{}),
		loadInto(ctx, r, cs.ReferenceGrants, &gwapiv1.ReferenceGrantList{}),
		loadInto(ctx, r, cs.BackendTLSPolicies, &gwapiv1.BackendTLSPolicyList{}),
		loadInto(ctx, r, cs.ListenerSets, &gwapiv1.ListenerSetList{}),
		loadInto(ctx, r, cs.ConfigMaps, &corev1.ConfigMapList{}),
		loadInto(ctx, r, cs.Services, &corev1.ServiceList{}),
		loadInto(ctx, r, cs.EndpointSlices, &discoveryv1.EndpointSliceList{}),
		loadInto(ctx, r, cs.Namespaces, &corev1.NamespaceList{}),
		loadInto(ctx, r, proxies, &appsv1.DeploymentList{}),
		loadInto(ctx, r, secrets, &corev1.SecretList{}),
	} {
		if err != nil {
			return Input{}, err
		}
	}
	// Metadata only, and few: listed.
	if err := r.List(ctx, &params, client.UnsafeDisableDeepCopy); err != nil {
		return Input{}, fmt.Errorf("list %T: %w", &params, err)
	}
	fill(cs.GatewayParameters, params.Items)
	for key, d := range proxies {
		if d.Labels[ProxyLabel] == ProxyLabelValue {
			cs.Deployments[key] = d
		}
	}
	for key, s := range secrets {
		if s.Type == corev1.SecretTypeTLS {
			cs.Secrets[key] = s
		}
	}
	version, channel, err := bundleVersion(ctx, r)
	if err != nil {
		return Input{}, err
	}
	return Input{State: cs, CRDBundleVersion: version, CRDChannel: channel}, nil
}

// informers is what the manager's cache gives besides reading: the informer of each kind.
type informers interface {
	GetInformer(ctx context.Context, obj client.Object, opts ...crcache.InformerGetOption) (crcache.Informer, error)
}

// storeOf is the part of a client-go informer that holds the cached objects; the informers of
// controller-runtime's cache are client-go's shared index informers.
type storeOf interface {
	GetStore() toolscache.Store
}

// loadInto puts every object of list's kind into into: from the kind's informer store when r
// gives one (no copy), else by listing r into list.
func loadInto[T any, P interface {
	*T
	client.Object
}, L client.ObjectList](ctx context.Context, r client.Reader, into map[types.NamespacedName]P, list L) error {
	if inf, ok := r.(informers); ok {
		informer, err := inf.GetInformer(ctx, P(new(T)))
		if err != nil {
			return fmt.Errorf("informer of %T: %w", list, err)
		}
		if store, ok := informer.(storeOf); ok {
			for _, item := range store.GetStore().List() {
				obj, ok := item.(P)
				if !ok {
					return fmt.Errorf("the informer of %T holds a %T", list, item)
				}
				into[state.Key(obj)] = obj
			}
			return nil
		}
	}
	if err := r.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("list %T: %w", list, err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return fmt.Errorf("list %T: %w", list, err)
	}
	for _, item := range items {
		obj, ok := item.(P)
		if !ok {
			return fmt.Errorf("list %T holds a %T", list, item)
		}
		into[state.Key(obj)] = obj
	}
	return nil
}

func fill[T any, P interface {
	*T
	metav1.Object
}](into map[types.NamespacedName]P, items []T) {
	for i := range items {
		obj := P(&items[i])
		into[state.Key(obj)] = obj
	}
}

// bundleVersion reads the bundle version and channel annotations of the GatewayClass CRD.
func bundleVersion(ctx context.Context, r client.Reader) (version, channel string, err error) {
	crd := &metav1.PartialObjectMetadata{}
	crd.SetGroupVersionKind(CRDGVK)
	err = r.Get(ctx, types.NamespacedName{Name: GatewayClassCRDName}, crd)
	if apierrors.IsNotFound(err) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("get CRD %s: %w", GatewayClassCRDName, err)
	}
	return crd.Annotations[BundleVersionAnnotation], crd.Annotations[ChannelAnnotation], nil
}
