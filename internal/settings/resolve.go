package settings

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"coxswain.dev/coxswain/api/v1alpha1"
)

// Resolve lays the fields set in a CoxswainConfig spec over base and validates the result. The
// API server's schema already rejects most bad values; Resolve catches what the schema cannot
// see, such as a port that collides with the other listener's flag default.
func Resolve(base Settings, spec *v1alpha1.CoxswainConfigSpec) (Settings, error) {
	s := base
	if spec != nil && spec.Discovery != nil {
		overlayDiscovery(&s, spec.Discovery)
	}
	if spec != nil && spec.Proxy != nil {
		overlayProxy(&s, spec.Proxy)
	}
	if spec != nil && spec.SharedPool != nil {
		overlaySharedPool(&s, spec.SharedPool)
	}
	if spec != nil && spec.ListenerSets != nil {
		setIf(&s.MaxListenerSetsPerGateway, spec.ListenerSets.MaxPerGateway)
		setIf(&s.MaxListenerSetsPerNamespace, spec.ListenerSets.MaxPerNamespace)
		setIf(&s.MaxListenersPerPort, spec.ListenerSets.MaxListenersPerPort)
	}
	if spec != nil && spec.Snapshots != nil {
		setIf(&s.MaxRouteBytesPerNamespace, spec.Snapshots.MaxRouteBytesPerNamespace)
	}
	if spec != nil && spec.Backends != nil {
		setIf(&s.EndpointSlices, spec.Backends.EndpointSlices)
	}
	if err := s.Validate(); err != nil {
		return Settings{}, err
	}
	return s, nil
}

func overlayDiscovery(s *Settings, d *v1alpha1.DiscoverySpec) {
	if d.CA != nil {
		setIf(&s.CAMode, d.CA.Mode)
		setIf(&s.CASecretName, d.CA.SecretName)
		if d.CA.DistrustedRoots != nil {
			s.DistrustedRoots = slices.Clone(d.CA.DistrustedRoots)
		}
	}
	setIf(&s.TrustDomain, d.TrustDomain)
	if d.SVIDTTL != nil {
		s.SVIDTTL = d.SVIDTTL.Duration
	}
	setIf(&s.Port, d.Port)
	setIf(&s.BootstrapPort, d.BootstrapPort)
	setIf(&s.MaxStreamsPerIdentity, d.MaxStreamsPerIdentity)
	setIf(&s.AllowUnboundTokens, d.AllowUnboundTokens)
}

func overlayProxy(s *Settings, p *v1alpha1.ProxyDefaults) {
	setIf(&s.ProxyImage, p.Image)
	setIf(&s.ProxyReplicas, p.Replicas)
	setIf(&s.ProxyServiceType, p.ServiceType)
	setIf(&s.ProxyHTTP1Engine, p.HTTP1Engine)
	if p.AccessLog != nil {
		s.ProxyAccessLog = p.AccessLog.DeepCopy()
	}
	if p.Tracing != nil {
		s.ProxyTracing = p.Tracing.DeepCopy()
	}
	if p.AllowedImages != nil {
		s.AllowedProxyImages = slices.Clone(p.AllowedImages)
	}
	if p.AllowedTracingEndpoints != nil {
		s.AllowedTracingEndpoints = slices.Clone(p.AllowedTracingEndpoints)
	}
	if p.Resources != nil {
		s.ProxyResources = *p.Resources.DeepCopy()
	}
}

func overlaySharedPool(s *Settings, p *v1alpha1.SharedPoolSpec) {
	setIf(&s.MaxSharedGatewaysPerNamespace, p.MaxGatewaysPerNamespace)
	setIf(&s.MaxSharedPortsPerNamespace, p.MaxPortsPerNamespace)
	if p.ServiceLabelPrefixes != nil {
		s.SharedServiceLabelPrefixes = slices.Clone(p.ServiceLabelPrefixes)
	}
	if p.ServiceAnnotationPrefixes != nil {
		s.SharedServiceAnnotationPrefixes = slices.Clone(p.ServiceAnnotationPrefixes)
	}
}

func setIf[T any](dst *T, src *T) {
	if src != nil {
		*dst = *src
	}
}

// Effective renders s as the status field of a CoxswainConfig.
func (s Settings) Effective() *v1alpha1.EffectiveSettings {
	return &v1alpha1.EffectiveSettings{
		MaxSharedGatewaysPerNamespace: s.MaxSharedGatewaysPerNamespace,
		MaxSharedPortsPerNamespace:    s.MaxSharedPortsPerNamespace,
		MaxListenerSetsPerGateway:     s.MaxListenerSetsPerGateway,
		MaxListenerSetsPerNamespace:   s.MaxListenerSetsPerNamespace,
		MaxListenersPerPort:           s.MaxListenersPerPort,
		MaxRouteBytesPerNamespace:     s.MaxRouteBytesPerNamespace,

		CAMode:                s.CAMode,
		CASecretName:          s.CASecretName,
		TrustDomain:           s.TrustDomain,
		SVIDTTL:               metav1.Duration{Duration: s.SVIDTTL},
		Port:                  s.Port,
		BootstrapPort:         s.BootstrapPort,
		MaxStreamsPerIdentity: s.MaxStreamsPerIdentity,
		ProxyImage:            s.ProxyImage,
		ProxyReplicas:         s.ProxyReplicas,
		ProxyServiceType:      s.ProxyServiceType,
		ProxyHTTP1Engine:      s.ProxyHTTP1Engine,
		ProxyAccessLog:        s.ProxyAccessLog.DeepCopy(),
		ProxyTracing:          s.ProxyTracing.DeepCopy(),
		EndpointSlices:        s.EndpointSlices,
	}
}
