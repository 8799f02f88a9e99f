package graph

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/pkg/consts"
	"sigs.k8s.io/gateway-api/pkg/features"

	"coxswain.dev/coxswain/internal/graph/conditions"
	"coxswain.dev/coxswain/internal/state"
)

// GatewayClass is one of our GatewayClasses.
type GatewayClass struct {
	Source *gwapiv1.GatewayClass
	// Accepted is false when the class's parametersRef cannot be used.
	Accepted bool
	// Dedicated is true when parametersRef names a CoxswainGatewayParameters: every Gateway of
	// the class then gets its own proxy.
	Dedicated bool
	// Parameters is the CoxswainGatewayParameters the class names, when Dedicated.
	Parameters types.NamespacedName
	Conditions []metav1.Condition
	// SupportedFeatures is the class's status.supportedFeatures for the installed CRD channel.
	SupportedFeatures []gwapiv1.SupportedFeature
}

// supportedFeatures is exactly what the graph, the compiler and the proxy implement.
var supportedFeatures = []features.FeatureName{
	features.SupportBackendTLSPolicy,
	features.SupportBackendTLSPolicySANValidation,
	features.SupportGateway,
	features.SupportGatewayBackendClientCertificate,
	features.SupportGatewayFrontendClientCertificateValidation,
	features.SupportGatewayFrontendClientCertificateValidationInsecureFallback,
	features.SupportGatewayAddressEmpty,
	features.SupportGatewayHTTPSListenerDetectMisdirectedRequests,
	features.SupportGatewayPort8080,
	features.SupportGatewayRouteHostnameIntersectionPrecedence,
	features.SupportGatewayHTTPListenerIsolation,
	features.SupportGatewayInfrastructure,
	features.SupportGatewayStaticAddresses,
	features.SupportGRPCRoute,
	features.SupportGRPCRouteNamedRouteRule,
	features.SupportGRPCRouteRequestHeaderModifier,
	features.SupportHTTPRoute,
	features.SupportHTTPRoute303RedirectStatusCode,
	features.SupportHTTPRoute307RedirectStatusCode,
	features.SupportHTTPRoute308RedirectStatusCode,
	features.SupportHTTPRouteBackendProtocolH2C,
	features.SupportHTTPRouteBackendProtocolWebSocket,
	features.SupportHTTPRouteBackendURLRewrite,
	features.SupportHTTPRouteBackendRequestHeaderModification,
	features.SupportHTTPRouteBackendTimeout,
	features.SupportHTTPRouteCORS,
	features.SupportHTTPRouteDestinationPortMatching,
	features.SupportHTTPRouteHostRewrite,
	features.SupportHTTPRouteMethodMatching,
	features.SupportHTTPRouteNamedRouteRule,
	features.SupportHTTPRouteParentRefPort,
	features.SupportHTTPRoutePathRedirect,
	features.SupportHTTPRoutePathRewrite,
	features.SupportHTTPRoutePortRedirect,
	features.SupportHTTPRouteQueryParamMatching,
	features.SupportHTTPRouteRequestMirror,
	features.SupportHTTPRouteRequestMultipleMirrors,
	features.SupportHTTPRouteRequestPercentageMirror,
	features.SupportHTTPRouteRequestTimeout,
	features.SupportHTTPRouteResponseHeaderModification,
	features.SupportHTTPRouteRetryCodes,
	features.SupportHTTPRouteRetryConnectionError,
	features.SupportHTTPRouteSchemeRedirect,
	features.SupportListenerSet,
	features.SupportReferenceGrant,
	features.SupportTCPRoute,
	features.SupportTLSRoute,
	features.SupportTLSRouteModeMixed,
	features.SupportTLSRouteModeTerminate,
	features.SupportUDPRoute,
}

// experimentalFeatures are implemented too but need fields of the experimental-channel CRDs,
// which the standard channel's drop: they are listed only when the experimental channel is
// installed.
var experimentalFeatures = []features.FeatureName{}

// ExperimentalChannel is the channel annotation value of the experimental-channel CRDs.
const ExperimentalChannel = "experimental"

// SupportedFeatures returns the GatewayClass status.supportedFeatures for the CRDs of channel
// (empty for standard), sorted by name.
func SupportedFeatures(channel string) []gwapiv1.SupportedFeature {
	out := make([]gwapiv1.SupportedFeature, 0, len(supportedFeatures)+len(experimentalFeatures))
	for _, f := range supportedFeatures {
		out = append(out, gwapiv1.SupportedFeature{Name: gwapiv1.FeatureName(f)})
	}
	if channel == ExperimentalChannel {
		for _, f := range experimentalFeatures {
			out = append(out, gwapiv1.SupportedFeature{Name: gwapiv1.FeatureName(f)})
		}
	}
	slices.SortFunc(out, func(a, b gwapiv1.SupportedFeature) int { return strings.Compare(string(a.Name), string(b.Name)) })
	return out
}

func (b *builder) buildGatewayClasses() []*GatewayClass {
	var out []*GatewayClass
	for _, key := range sortedKeys(b.cs.GatewayClasses) {
		src := b.cs.GatewayClasses[key]
		if src.Spec.ControllerName != b.opts.ControllerName {
			continue
		}
		gc := b.newGatewayClass(src)
		b.classes[src.Name] = gc
		out = append(out, gc)
	}
	return out
}

func (b *builder) newGatewayClass(src *gwapiv1.GatewayClass) *GatewayClass {
	gc := &GatewayClass{Source: src, Accepted: true, SupportedFeatures: SupportedFeatures(b.opts.CRDChannel)}
	accepted := conditions.NewGatewayClassAccepted()
	if ref := src.Spec.ParametersRef; ref != nil {
		if msg := b.checkClassParameters(ref); msg != "" {
			gc.Accepted = false
			accepted = conditions.NewGatewayClassInvalidParameters(msg)
		} else {
			gc.Dedicated = true
			gc.Parameters = types.NamespacedName{Namespace: string(*ref.Namespace), Name: ref.Name}
		}
	}
	gc.Conditions = conditions.Stamp([]metav1.Condition{accepted, b.versionCondition()}, src.Generation)
	return gc
}

func (b *builder) checkClassParameters(ref *gwapiv1.ParametersReference) string {
	if !isParametersKind(ref.Group, ref.Kind) {
		return fmt.Sprintf("parametersRef must be %s/%s, not %s/%s",
			state.GatewayParametersGroup, state.GatewayParametersKind, ref.Group, ref.Kind)
	}
	if ref.Namespace == nil {
		return "parametersRef to a CoxswainGatewayParameters needs a namespace"
	}
	key := types.NamespacedName{Namespace: string(*ref.Namespace), Name: ref.Name}
	if _, ok := b.cs.GatewayParameters[key]; !ok {
		return fmt.Sprintf("CoxswainGatewayParameters %s not found", key)
	}
	return ""
}

func isParametersKind(group gwapiv1.Group, kind gwapiv1.Kind) bool {
	return string(group) == state.GatewayParametersGroup && string(kind) == state.GatewayParametersKind
}

// versionCondition compares the major.minor of the installed CRD bundle with ours.
func (b *builder) versionCondition() metav1.Condition {
	found := b.opts.CRDBundleVersion
	if majorMinor(found) == majorMinor(consts.BundleVersion) {
		return conditions.NewGatewayClassSupportedVersion(found)
	}
	return conditions.NewGatewayClassUnsupportedVersion(found, majorMinor(consts.BundleVersion)+".x")
}

func majorMinor(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}
