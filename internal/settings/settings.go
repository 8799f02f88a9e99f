package settings

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"coxswain.dev/coxswain/api/v1alpha1"
	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/buildinfo"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// Environment variables that give the operator's defaults.
const (
	EnvCAMode        = "COXSWAIN_DISCOVERY_CA_MODE"
	EnvCASecret      = "COXSWAIN_DISCOVERY_CA_SECRET" //nolint:gosec // the name of a variable, not a credential
	EnvSVIDTTL       = "COXSWAIN_DISCOVERY_SVID_TTL"
	EnvTrustDomain   = "COXSWAIN_DISCOVERY_TRUST_DOMAIN"
	EnvPort          = "COXSWAIN_DISCOVERY_PORT"
	EnvBootstrapPort = "COXSWAIN_DISCOVERY_BOOTSTRAP_PORT"
	EnvProxyImage    = "COXSWAIN_PROXY_IMAGE"
	// EnvMaxStreamsPerIdentity caps the live streams of one proxy identity.
	EnvMaxStreamsPerIdentity = "COXSWAIN_DISCOVERY_MAX_STREAMS_PER_IDENTITY"
)

// DefaultProxyImage is the proxy image used when nothing else names one: the proxy of the
// operator's own release (buildinfo, stamped by `make release`).
var DefaultProxyImage = buildinfo.ProxyImage()

// DefaultProxyReplicas is the number of proxy pods used when nothing else names one.
const DefaultProxyReplicas int32 = 2

// ErrInvalid is wrapped by every validation error of this package.
var ErrInvalid = errors.New("invalid setting")

// Settings is the operator's effective configuration.
type Settings struct {
	CAMode        v1alpha1.CAMode
	CASecretName  string
	TrustDomain   string
	SVIDTTL       time.Duration
	Port          int32
	BootstrapPort int32
	// MaxStreamsPerIdentity caps the live snapshot streams of one SPIFFE ID.
	MaxStreamsPerIdentity int32
	// DistrustedRoots are SHA-256 fingerprints (lowercase hex) of CA roots trusted no more.
	DistrustedRoots []string
	// AllowUnboundTokens lets bootstrap tokens bound to no pod obtain an SVID.
	AllowUnboundTokens bool
	ProxyImage         string
	ProxyReplicas      int32
	ProxyResources     corev1.ResourceRequirements
	// ProxyServiceType is the type of the Services that give Gateways their addresses.
	ProxyServiceType corev1.ServiceType
	// ProxyHTTP1Engine is the HTTP/1.1 engine of provisioned proxies; the proxy's default when
	// empty.
	ProxyHTTP1Engine v1alpha1.HTTP1Engine
	// ProxyAccessLog is the access log format and fields of provisioned proxies; the proxy's
	// defaults when nil.
	ProxyAccessLog *v1alpha1.AccessLog
	// ProxyTracing is where provisioned proxies send their request spans; off when nil.
	ProxyTracing *v1alpha1.Tracing
	// AllowedProxyImages are the images (exact, or a prefix ending with "*") a Gateway's own
	// parameters may name; a GatewayClass's parameters may name any.
	AllowedProxyImages []string
	// AllowedTracingEndpoints are the collector URLs (exact, or a prefix ending with "*") the
	// tracing of a Gateway's own parameters may name; a GatewayClass's parameters may name any.
	AllowedTracingEndpoints []string
	// MaxSharedGatewaysPerNamespace and MaxSharedPortsPerNamespace cap what one namespace's
	// Gateways take of the shared pool.
	MaxSharedGatewaysPerNamespace int32
	MaxSharedPortsPerNamespace    int32
	// SharedServiceLabelPrefixes and SharedServiceAnnotationPrefixes are the key prefixes of a
	// shared pool Gateway's spec.infrastructure metadata that reach its Service.
	SharedServiceLabelPrefixes      []string
	SharedServiceAnnotationPrefixes []string
	// MaxRouteBytesPerNamespace caps the encoded bytes the routes of one namespace take of one
	// scope's snapshot (graph.Options.MaxRouteBytesPerNamespace).
	MaxRouteBytesPerNamespace int64
	// EndpointSlices says which EndpointSlices' endpoints backends may use: Verified (also when
	// empty) or Any.
	EndpointSlices v1alpha1.EndpointSliceTrust
	// MaxListenerSetsPerGateway, MaxListenerSetsPerNamespace and MaxListenersPerPort cap the
	// listeners ListenerSets add to Gateways.
	MaxListenerSetsPerGateway   int32
	MaxListenerSetsPerNamespace int32
	MaxListenersPerPort         int32
}

// Defaults returns the built-in defaults of the specification.
func Defaults() Settings {
	return Settings{
		MaxSharedGatewaysPerNamespace: wellknown.DefaultMaxSharedGatewaysPerNamespace,
		MaxSharedPortsPerNamespace:    wellknown.DefaultMaxSharedPortsPerNamespace,
		MaxListenerSetsPerGateway:     wellknown.DefaultMaxListenerSetsPerGateway,
		MaxListenerSetsPerNamespace:   wellknown.DefaultMaxListenerSetsPerNamespace,
		MaxListenersPerPort:           wellknown.DefaultMaxListenersPerPort,
		MaxRouteBytesPerNamespace:     wellknown.DefaultMaxRouteBytesPerNamespace,

		CAMode:                v1alpha1.CAMode(wellknown.CAModeAuto),
		CASecretName:          wellknown.CASecretName,
		TrustDomain:           wellknown.DefaultTrustDomain,
		SVIDTTL:               wellknown.DefaultSVIDTTL,
		Port:                  wellknown.StreamPort,
		BootstrapPort:         wellknown.BootstrapPort,
		MaxStreamsPerIdentity: wellknown.DefaultMaxStreamsPerIdentity,
		ProxyImage:            DefaultProxyImage,
		ProxyReplicas:         DefaultProxyReplicas,
		ProxyServiceType:      corev1.ServiceTypeLoadBalancer,
		EndpointSlices:        v1alpha1.EndpointSliceTrustVerified,
	}
}

// Validate reports every problem of s, each naming the field it concerns.
func (s Settings) Validate() error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...)))
	}
	if _, err := ParseCAMode(string(s.CAMode)); err != nil {
		add("discovery.ca.mode", "%v", err)
	}
	for _, msg := range validation.IsDNS1123Subdomain(s.CASecretName) {
		add("discovery.ca.secretName", "%s", msg)
	}
	if err := ValidateTrustDomain(s.TrustDomain); err != nil {
		add("discovery.trustDomain", "%v", err)
	}
	if s.SVIDTTL < wellknown.MinSVIDTTL || s.SVIDTTL > wellknown.MaxSVIDTTL {
		add("discovery.svidTTL", "%s is outside %s..%s", s.SVIDTTL, wellknown.MinSVIDTTL, wellknown.MaxSVIDTTL)
	}
	for field, port := range map[string]int32{"discovery.port": s.Port, "discovery.bootstrapPort": s.BootstrapPort} {
		if port < 1 || port > 65535 {
			add(field, "%d is outside 1..65535", port)
		}
	}
	if s.Port == s.BootstrapPort {
		add("discovery.bootstrapPort", "%d is also discovery.port; the two listeners need different ports", s.Port)
	}
	if s.MaxStreamsPerIdentity < 1 || s.MaxStreamsPerIdentity > wellknown.MaxMaxStreamsPerIdentity {
		add("discovery.maxStreamsPerIdentity", "%d is outside 1..%d", s.MaxStreamsPerIdentity, wellknown.MaxMaxStreamsPerIdentity)
	}
	for _, fp := range s.DistrustedRoots {
		if len(fp) != 64 || strings.Trim(fp, "0123456789abcdef") != "" {
			add("discovery.ca.distrustedRoots", "%q is not a lowercase hex SHA-256", fp)
		}
	}
	if s.EndpointSlices != "" && s.EndpointSlices != v1alpha1.EndpointSliceTrustVerified && s.EndpointSlices != v1alpha1.EndpointSliceTrustAny {
		add("backends.endpointSlices", "%q is not Verified or Any", s.EndpointSlices)
	}
	for field, n := range map[string]int32{
		"sharedPool.maxGatewaysPerNamespace": s.MaxSharedGatewaysPerNamespace, "sharedPool.maxPortsPerNamespace": s.MaxSharedPortsPerNamespace,
	} {
		if n < 1 || n > wellknown.MaxSharedPoolLimit {
			add(field, "%d is outside 1..%d", n, wellknown.MaxSharedPoolLimit)
		}
	}
	for field, n := range map[string]int32{
		"listenerSets.maxPerGateway": s.MaxListenerSetsPerGateway, "listenerSets.maxPerNamespace": s.MaxListenerSetsPerNamespace,
	} {
		if n < 1 || n > wellknown.MaxListenerLimit {
			add(field, "%d is outside 1..%d", n, wellknown.MaxListenerLimit)
		}
	}
	if n := s.MaxListenersPerPort; n < wellknown.MinMaxListenersPerPort || n > wellknown.MaxListenerLimit {
		add("listenerSets.maxListenersPerPort", "%d is outside %d..%d", n, wellknown.MinMaxListenersPerPort, wellknown.MaxListenerLimit)
	}
	if s.MaxRouteBytesPerNamespace < wellknown.MinRouteBytesPerNamespace || s.MaxRouteBytesPerNamespace > discoveryv1.MaxScopeRouteBytes {
		add("snapshots.maxRouteBytesPerNamespace", "%d is outside %d..%d", s.MaxRouteBytesPerNamespace, wellknown.MinRouteBytesPerNamespace, discoveryv1.MaxScopeRouteBytes)
	}
	if s.ProxyReplicas < 0 {
		add("proxy.replicas", "%d is negative", s.ProxyReplicas)
	}
	return errors.Join(errs...)
}

// ParseCAMode accepts the CA mode in any letter case ("auto", "Auto", "EXTERNAL").
func ParseCAMode(s string) (v1alpha1.CAMode, error) {
	for _, m := range []v1alpha1.CAMode{v1alpha1.CAModeAuto, v1alpha1.CAModeExternal} {
		if strings.EqualFold(s, string(m)) {
			return m, nil
		}
	}
	return "", fmt.Errorf("%q is not Auto or External", s)
}

// ValidateTrustDomain checks a SPIFFE trust domain name: lowercase letters, digits, '.', '-'
// and '_', with no scheme, port or path.
func ValidateTrustDomain(td string) error {
	if td == "" {
		return errors.New("must not be empty")
	}
	if len(td) > 255 {
		return errors.New("must be at most 255 characters")
	}
	for _, c := range td {
		if !validTrustDomainChar(c) {
			return fmt.Errorf("%q has the character %q; only lowercase letters, digits, '.', '-' and '_' are allowed (no scheme, port or path)", td, c)
		}
	}
	return nil
}

func parsePort(s string) (int32, error) {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%q is not a port number", s)
	}
	return int32(n), nil
}

func validTrustDomainChar(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_'
}
