package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CAMode says how the discovery certificate authority is provisioned.
// +kubebuilder:validation:Enum=Auto;External
type CAMode string

const (
	// CAModeAuto generates the CA on first start and stores it in the CA Secret.
	CAModeAuto CAMode = "Auto"
	// CAModeExternal consumes a CA Secret written by someone else (cert-manager or by hand) and
	// fails closed while it is absent or unusable.
	CAModeExternal CAMode = "External"
)

// Condition types of a CoxswainConfig.
const (
	// ConditionReady is True when the settings are valid and the discovery channel serves.
	ConditionReady = "Ready"
	// ConditionCAReady is True when the discovery CA is loaded and usable.
	ConditionCAReady = "CAReady"
	// ConditionDiscoveryServing is True when the bootstrap and stream listeners accept connections.
	ConditionDiscoveryServing = "DiscoveryServing"
	// ConditionTrustBundlePublished is True when the trust bundle ConfigMap holds the current roots.
	ConditionTrustBundlePublished = "TrustBundlePublished"
)

// CoxswainConfigSpec configures the operator. Every field is optional: an unset field takes the
// operator's flag or environment value, and failing that the built-in default.
type CoxswainConfigSpec struct {
	// Discovery configures the control channel between the controller and its proxies.
	// +optional
	Discovery *DiscoverySpec `json:"discovery,omitempty"`

	// Proxy holds the defaults the operator uses for the proxies it provisions.
	// +optional
	Proxy *ProxyDefaults `json:"proxy,omitempty"`

	// SharedPool bounds what the Gateways served by the shared pool make the operator create in
	// its own namespace, outside their namespaces' quotas: one Service per Gateway, carrying only
	// the metadata allowed here, and internal ports of the pool.
	// +optional
	SharedPool *SharedPoolSpec `json:"sharedPool,omitempty"`

	// ListenerSets bounds the listeners that ListenerSets add to Gateways: every listener of a
	// Gateway port is a virtual host that each proxy serving the Gateway holds and the operator
	// compiles.
	// +optional
	ListenerSets *ListenerSetsSpec `json:"listenerSets,omitempty"`

	// Backends says which endpoints of the Services that routes name may receive traffic.
	// +optional
	Backends *BackendsSpec `json:"backends,omitempty"`

	// Snapshots bounds what the routes of one namespace take of the routing snapshot of a scope
	// (the shared pool, or a dedicated Gateway's proxies), which must fit in one stream message.
	// +optional
	Snapshots *SnapshotsSpec `json:"snapshots,omitempty"`
}

// SnapshotsSpec bounds the routes' share of a scope's routing snapshot.
type SnapshotsSpec struct {
	// MaxRouteBytesPerNamespace caps the encoded bytes the routes of one namespace take of one
	// scope's snapshot, every copy counted (a route is copied for each listener and hostname it
	// attaches to): the oldest routes are served, a route beyond it is Accepted=False with
	// reason SnapshotSizeLimitReached on that scope's Gateways. The routes of all namespaces
	// take at most 48 MiB of a snapshot whatever this says. Default 8388608 (8 MiB).
	// +optional
	// +kubebuilder:validation:Minimum=65536
	// +kubebuilder:validation:Maximum=50331648
	MaxRouteBytesPerNamespace *int64 `json:"maxRouteBytesPerNamespace,omitempty"`
}

// ListenerSetsSpec caps the ListenerSets attached to Gateways and the listeners they add. The
// caps follow the spec's precedence (a Gateway's own listeners, then ListenerSets oldest
// first), so a newcomer never displaces what already serves.
type ListenerSetsSpec struct {
	// MaxPerGateway caps the ListenerSets attached to one Gateway, from any namespaces: a newer
	// one is Accepted=False with reason ListenerSetLimitReached. Default 256.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65536
	MaxPerGateway *int32 `json:"maxPerGateway,omitempty"`

	// MaxPerNamespace caps the ListenerSets of one namespace attached to Gateways, whichever
	// Gateways: a newer one is Accepted=False with reason ListenerSetLimitReached. Default 128.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65536
	MaxPerNamespace *int32 `json:"maxPerNamespace,omitempty"`

	// MaxListenersPerPort caps the accepted listeners of one Gateway port, the Gateway's own
	// (at most 64) first, then its ListenerSets': a ListenerSet listener beyond is
	// Accepted=False and Programmed=False with reason ListenerLimitReached. Default 1024.
	// +optional
	// +kubebuilder:validation:Minimum=64
	// +kubebuilder:validation:Maximum=65536
	MaxListenersPerPort *int32 `json:"maxListenersPerPort,omitempty"`
}

// EndpointSliceTrust says which EndpointSlices' endpoints a Service's traffic may reach.
// +kubebuilder:validation:Enum=Verified;Any
type EndpointSliceTrust string

const (
	// EndpointSliceTrustVerified uses the endpoints of a slice that the EndpointSlice controller
	// manages (label endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io) for
	// a Service with a selector, and of any other slice only the endpoints whose targetRef is a
	// Pod of the Service's namespace.
	EndpointSliceTrustVerified EndpointSliceTrust = "Verified"
	// EndpointSliceTrustAny uses the endpoints of every EndpointSlice of a Service, whoever
	// wrote it: selector-less Services with hand-written slices pointing anywhere.
	EndpointSliceTrustAny EndpointSliceTrust = "Any"
)

// BackendsSpec configures how the operator reads the endpoints of backend Services.
type BackendsSpec struct {
	// EndpointSlices is Verified (the default) or Any. Whoever may write an EndpointSlice
	// chooses where its Service's traffic goes (CVE-2021-25740): Verified takes only the
	// EndpointSlice controller's slices of Services with a selector, and otherwise only
	// endpoints whose targetRef is a Pod of the Service's namespace; Any takes every slice, as
	// selector-less Services with hand-written slices of external addresses need. Loopback,
	// link-local, unspecified and multicast addresses are refused either way.
	// +optional
	EndpointSlices *EndpointSliceTrust `json:"endpointSlices,omitempty"`
}

// DiscoverySpec configures the discovery CA, the SPIFFE identities it issues and the listeners.
// +kubebuilder:validation:XValidation:rule="!has(self.port) || !has(self.bootstrapPort) || self.port != self.bootstrapPort",message="discovery.port and discovery.bootstrapPort must differ"
type DiscoverySpec struct {
	// CA configures the certificate authority that signs proxy identities.
	// +optional
	CA *CASpec `json:"ca,omitempty"`

	// TrustDomain is the SPIFFE trust domain of every identity the CA issues: lowercase letters,
	// digits, '.', '-' and '_', without a scheme, port or path. Default "cluster.local".
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[a-z0-9._-]+$`
	TrustDomain *string `json:"trustDomain,omitempty"`

	// SVIDTTL is the lifetime of a proxy's certificate; proxies renew at about half of it.
	// From 1m to 720h (30 days). Default 24h. Production wants hours; minutes exist to exercise
	// rotation in tests.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m') && duration(self) <= duration('720h')",message="svidTTL must be between 1m and 720h (30 days)"
	SVIDTTL *metav1.Duration `json:"svidTTL,omitempty"`

	// Port is the port of the mutual-TLS snapshot stream listener. Default 50051.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port *int32 `json:"port,omitempty"`

	// BootstrapPort is the port of the server-authenticated bootstrap listener. Default 50052.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	BootstrapPort *int32 `json:"bootstrapPort,omitempty"`

	// MaxStreamsPerIdentity caps the live snapshot streams one proxy identity (SPIFFE ID) may
	// hold on each controller replica: a dedicated Gateway needs its replicas plus a rollout's
	// surge, the shared pool its replicas plus surge. Default 32.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4096
	MaxStreamsPerIdentity *int32 `json:"maxStreamsPerIdentity,omitempty"`

	// AllowUnboundTokens lets a bootstrap token that is bound to no pod obtain an SVID. Off by
	// default: a proxy's projected token is bound to its pod, which must exist, be scheduled to a
	// node, not have finished and not be terminating; an unbound token (TokenRequest without a
	// boundObjectRef) would let whoever may request tokens for a proxy's ServiceAccount obtain its
	// identity without running a pod. Default false.
	// +optional
	AllowUnboundTokens *bool `json:"allowUnboundTokens,omitempty"`
}

// CASpec configures the discovery certificate authority.
type CASpec struct {
	// Mode is Auto (generate and store the CA) or External (consume an existing Secret and fail
	// closed without it). Default Auto.
	// +optional
	Mode *CAMode `json:"mode,omitempty"`

	// SecretName is the Secret in the operator's namespace that holds the CA (tls.crt, tls.key).
	// Default "coxswain-discovery-ca".
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	SecretName *string `json:"secretName,omitempty"`

	// DistrustedRoots are CA certificates trusted no more, by the SHA-256 of their DER encoding
	// in lowercase hex (`openssl x509 -outform der | sha256sum`): incident response for a
	// compromised root. A distrusted root leaves the trust bundle at once, the streams of
	// certificates it signed are closed, and when it is the signing CA the controller fails
	// closed until the CA Secret holds another (in Auto mode, delete the Secret).
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Pattern=`^[0-9a-f]{64}$`
	DistrustedRoots []string `json:"distrustedRoots,omitempty"`
}

// ProxyDefaults are what the provisioner uses for a proxy Deployment when nothing more specific
// is asked for.
type ProxyDefaults struct {
	// Image is the proxy container image.
	// +optional
	// +kubebuilder:validation:MinLength=1
	Image *string `json:"image,omitempty"`

	// Replicas is the number of proxy pods.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Replicas *int32 `json:"replicas,omitempty"`

	// Resources are the proxy container's compute resources.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// ServiceType is the type of the Service that gives a Gateway its address: every shared pool
	// Gateway's, and a dedicated proxy's unless its parameters name one. Default LoadBalancer.
	// +optional
	// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer
	ServiceType *corev1.ServiceType `json:"serviceType,omitempty"`

	// AllowedImages are the proxy images the CoxswainGatewayParameters of a Gateway's own
	// spec.infrastructure.parametersRef may name in spec.image: an exact image reference, or a
	// prefix ending with "*" ("registry.example/coxswain-proxy@sha256:*"). The proxy runs as the
	// Gateway's identity and receives every key its Gateway names, so its image is the
	// operator's choice: the image of parameters a GatewayClass names is always used, any other
	// only when listed here. Default: none.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +listType=set
	AllowedImages []string `json:"allowedImages,omitempty"`

	// AllowedTracingEndpoints are the collector URLs the tracing.endpoint of a Gateway's own
	// spec.infrastructure.parametersRef may name: an exact URL, or a prefix ending with "*"
	// ("https://otel-collector.observability.svc:*"). The proxy sends that collector every
	// request's path, host and client address, so it is the operator's choice: the tracing of
	// parameters a GatewayClass names is always used, a Gateway's own only when listed here,
	// and an endpoint whose host is a loopback, link-local (cloud metadata), unspecified or
	// multicast address, a metadata service's name, localhost or a non-dotted number only
	// through an exact entry, never a prefix. An endpoint not admitted leaves the proxy with
	// spec.proxy.tracing (or none) and a Warning event (TracingEndpointNotAllowed) on the
	// Gateway. Default: none.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=2048
	// +listType=set
	AllowedTracingEndpoints []string `json:"allowedTracingEndpoints,omitempty"`

	// HTTP1Engine is the HTTP/1.1 engine of the proxies the operator provisions (their
	// --http1-engine flag): Native, the proxy's own strict codec and upstream client, or NetHTTP,
	// Go's net/http. A Gateway's CoxswainGatewayParameters may choose otherwise. Default: the
	// proxy's own default. The shared pool's Deployment is not provisioned: set its flag there.
	// +optional
	HTTP1Engine *HTTP1Engine `json:"http1Engine,omitempty"`

	// AccessLog is what the access log of the proxies the operator provisions writes (their
	// --access-log-format and --access-log-fields flags). A Gateway's CoxswainGatewayParameters
	// may choose otherwise, field by field. Default: the proxy's own, JSON with every field.
	// +optional
	AccessLog *AccessLog `json:"accessLog,omitempty"`

	// Tracing sends a span per request of the proxies the operator provisions to an
	// OpenTelemetry collector (their --tracing-* flags). A Gateway's CoxswainGatewayParameters
	// may replace it (a Gateway's own only with an endpoint allowedTracingEndpoints admits).
	// Default: off (the proxies still pass the clients' W3C trace context on).
	// +optional
	Tracing *Tracing `json:"tracing,omitempty"`
}

// Tracing is where a proxy's request spans go and which requests get one (see
// docs/observability.md).
type Tracing struct {
	// Endpoint is the collector's OTLP URL: http://host:port for plaintext, https://host:port for
	// TLS verified against the system roots. For the http/protobuf protocol a path may follow
	// (default /v1/traces); for grpc none may.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://[^/?#\s]+(/[^?#\s]*)?$`
	Endpoint string `json:"endpoint"`

	// Protocol is the OTLP transport: grpc or http/protobuf. Default: grpc.
	// +optional
	Protocol *TracingProtocol `json:"protocol,omitempty"`

	// SamplingFraction is the share of the traces that are recorded: of those that start at the
	// proxy, and of those a request's traceparent continues unless trustParentSampling.
	// Default: every trace (1/1).
	// +optional
	SamplingFraction *SamplingFraction `json:"samplingFraction,omitempty"`

	// TrustParentSampling follows the decision of a request's traceparent (its sampled flag)
	// instead of samplingFraction. Off, the caller's trace is continued but the proxy decides
	// whether to record it, so that no client can have its requests recorded (and fill the
	// export queue) by setting the flag: turn it on only for a proxy whose every caller is
	// trusted. Default: false.
	// +optional
	TrustParentSampling *bool `json:"trustParentSampling,omitempty"`
}

// TracingProtocol is an OTLP transport; the values are the proxy flag's.
// +kubebuilder:validation:Enum=grpc;http/protobuf
type TracingProtocol string

// The OTLP transports.
const (
	TracingProtocolGRPC TracingProtocol = "grpc"
	TracingProtocolHTTP TracingProtocol = "http/protobuf"
)

// SamplingFraction is numerator/denominator, at most 1.
// +kubebuilder:validation:XValidation:rule="self.numerator <= self.denominator",message="numerator must not exceed denominator"
type SamplingFraction struct {
	// +kubebuilder:validation:Minimum=0
	Numerator int32 `json:"numerator"`
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=1
	Denominator int32 `json:"denominator,omitempty"`
}

// AccessLog is the form and content of a proxy's access log lines (see docs/observability.md).
type AccessLog struct {
	// Format is Text (key=value pairs) or JSON (one object a line). Default: JSON.
	// +optional
	Format *AccessLogFormat `json:"format,omitempty"`

	// Fields are the fields of a line, in the order written. Default: every field.
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	Fields []AccessLogField `json:"fields,omitempty"`
}

// AccessLogFormat is a line format of the access log; the values are the proxy flag's.
// +kubebuilder:validation:Enum=json;text
type AccessLogFormat string

// The access log formats.
const (
	AccessLogFormatJSON AccessLogFormat = "json"
	AccessLogFormatText AccessLogFormat = "text"
)

// AccessLogField is a field of the access log; the values are the proxy's field names.
// +kubebuilder:validation:Enum=time;requestID;clientAddress;clientPort;protocol;tlsVersion;sni;gateway;listener;host;method;path;route;rule;status;reason;upstream;upstreamStatus;retries;bytesIn;bytesOut;durationMs;upstreamConnectMs;ttfbMs
type AccessLogField string

// HTTP1Engine names an HTTP/1.1 engine of the proxy; the values are the proxy flag's.
// +kubebuilder:validation:Enum=native;nethttp
type HTTP1Engine string

// The HTTP/1.1 engines (wellknown.HTTP1EngineNative and wellknown.HTTP1EngineNetHTTP).
const (
	HTTP1EngineNative  HTTP1Engine = "native"
	HTTP1EngineNetHTTP HTTP1Engine = "nethttp"
)

// SharedPoolSpec bounds what one namespace's Gateways take of the shared pool.
type SharedPoolSpec struct {
	// MaxGatewaysPerNamespace caps the shared pool Gateways of one namespace: the oldest are
	// accepted, a newer one is Accepted=False with reason NamespaceLimitReached. Default 64.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	MaxGatewaysPerNamespace *int32 `json:"maxGatewaysPerNamespace,omitempty"`

	// MaxPortsPerNamespace caps the internal ports (one per distinct listener port of each
	// Gateway) the shared pool Gateways of one namespace hold together; the range has 10,000. A
	// listener port beyond it gets none, and its listener is Programmed=False with reason
	// PortsExhausted. Default 256.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	MaxPortsPerNamespace *int32 `json:"maxPortsPerNamespace,omitempty"`

	// ServiceLabelPrefixes are the key prefixes of a shared pool Gateway's
	// spec.infrastructure.labels that reach its Service in the operator's namespace; any other
	// key stays behind. A prefix matches the start of a key ("example.com/" takes every key of
	// that domain, "team" takes "team" and "team-name"). Default: none.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +listType=set
	ServiceLabelPrefixes []string `json:"serviceLabelPrefixes,omitempty"`

	// ServiceAnnotationPrefixes are the key prefixes of a shared pool Gateway's
	// spec.infrastructure.annotations that reach its Service, as ServiceLabelPrefixes. Annotations
	// are what load balancers, external-dns and MetalLB read ("external-dns.alpha.kubernetes.io/",
	// "metallb.io/"): allow only those your tenants may set for themselves. Default: none.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +listType=set
	ServiceAnnotationPrefixes []string `json:"serviceAnnotationPrefixes,omitempty"`
}

// EffectiveSettings are the settings in force after applying the CoxswainConfig over the
// operator's flags, environment and built-in defaults.
type EffectiveSettings struct {
	CAMode        CAMode          `json:"caMode"`
	CASecretName  string          `json:"caSecretName"`
	TrustDomain   string          `json:"trustDomain"`
	SVIDTTL       metav1.Duration `json:"svidTTL"`
	Port          int32           `json:"port"`
	BootstrapPort int32           `json:"bootstrapPort"`
	// +optional
	MaxStreamsPerIdentity int32  `json:"maxStreamsPerIdentity,omitempty"`
	ProxyImage            string `json:"proxyImage,omitempty"`
	ProxyReplicas         int32  `json:"proxyReplicas"`
	// +optional
	ProxyServiceType corev1.ServiceType `json:"proxyServiceType,omitempty"`
	// +optional
	ProxyHTTP1Engine HTTP1Engine `json:"proxyHTTP1Engine,omitempty"`
	// +optional
	ProxyAccessLog *AccessLog `json:"proxyAccessLog,omitempty"`
	// +optional
	ProxyTracing *Tracing `json:"proxyTracing,omitempty"`
	// +optional
	MaxSharedGatewaysPerNamespace int32 `json:"maxSharedGatewaysPerNamespace,omitempty"`
	// +optional
	MaxSharedPortsPerNamespace int32 `json:"maxSharedPortsPerNamespace,omitempty"`
	// +optional
	EndpointSlices EndpointSliceTrust `json:"endpointSlices,omitempty"`
	// +optional
	MaxListenerSetsPerGateway int32 `json:"maxListenerSetsPerGateway,omitempty"`
	// +optional
	MaxListenerSetsPerNamespace int32 `json:"maxListenerSetsPerNamespace,omitempty"`
	// +optional
	MaxListenersPerPort int32 `json:"maxListenersPerPort,omitempty"`
	// +optional
	MaxRouteBytesPerNamespace int64 `json:"maxRouteBytesPerNamespace,omitempty"`
}

// CoxswainConfigStatus is the observed state of a CoxswainConfig.
type CoxswainConfigStatus struct {
	// ObservedGeneration is the generation the status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Effective shows the settings in force.
	// +optional
	Effective *EffectiveSettings `json:"effective,omitempty"`

	// Conditions: Ready, CAReady, DiscoveryServing, TrustBundlePublished.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// CoxswainConfig configures the Coxswain operator. The operator reads the one named by its
// --config-name flag in its own namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cxcfg
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.status.effective.caMode`
// +kubebuilder:printcolumn:name="Trust Domain",type=string,JSONPath=`.status.effective.trustDomain`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CoxswainConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   CoxswainConfigSpec   `json:"spec,omitempty"`
	Status CoxswainConfigStatus `json:"status,omitempty"`
}

// CoxswainConfigList is a list of CoxswainConfig.
//
// +kubebuilder:object:root=true
type CoxswainConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CoxswainConfig `json:"items"`
}
