package rebuild

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
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
func Load(ctx context.Context, r client.Reader) (Input, error) {
	cs := state.New()
	var (
		classes    gwapiv1.GatewayClassList
		gateways   gwapiv1.GatewayList
		routes     gwapiv1.HTTPRouteList
		grants     gwapiv1.ReferenceGrantList
		policies   gwapiv1.BackendTLSPolicyList
		sets       gwapiv1.ListenerSetList
		configMaps corev1.ConfigMapList
		services   corev1.ServiceList
		slices     discoveryv1.EndpointSliceList
		secrets    corev1.SecretList
		namespaces corev1.NamespaceList
		params     metav1.PartialObjectMetadataList
		proxies    appsv1.DeploymentList
	)
	params.SetGroupVersionKind(GatewayParametersGVK.GroupVersion().WithKind(GatewayParametersGVK.Kind + "List"))
	for _, list := range []client.ObjectList{&classes, &gateways, &routes, &grants, &policies, &sets, &configMaps, &services, &slices, &secrets, &namespaces, &params, &proxies} {
		if err := r.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			return Input{}, fmt.Errorf("list %T: %w", list, err)
		}
	}
	fill(cs.GatewayClasses, classes.Items)
	fill(cs.Gateways, gateways.Items)
	fill(cs.HTTPRoutes, routes.Items)
	fill(cs.ReferenceGrants, grants.Items)
	fill(cs.BackendTLSPolicies, policies.Items)
	fill(cs.ListenerSets, sets.Items)
	fill(cs.ConfigMaps, configMaps.Items)
	fill(cs.Services, services.Items)
	fill(cs.EndpointSlices, slices.Items)
	fill(cs.Namespaces, namespaces.Items)
	fill(cs.GatewayParameters, params.Items)
	for i := range proxies.Items {
		if d := &proxies.Items[i]; d.Labels[ProxyLabel] == ProxyLabelValue {
			cs.Deployments[state.Key(d)] = d
		}
	}
	for i := range secrets.Items {
		if s := &secrets.Items[i]; s.Type == corev1.SecretTypeTLS {
			cs.Secrets[state.Key(s)] = s
		}
	}
	version, channel, err := bundleVersion(ctx, r)
	if err != nil {
		return Input{}, err
	}
	return Input{State: cs, CRDBundleVersion: version, CRDChannel: channel}, nil
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
