// Package wellknown holds the fixed names, ports and defaults of the Coxswain control channel.
// Every other package, in the operator and in the proxy, imports them from here so that each
// fact is defined exactly once.
package wellknown

import "time"

const (
	// InstallNamespace is the namespace the operator is installed into by default.
	InstallNamespace = "coxswain-system"

	// GatewayControllerName is the GatewayClass controllerName that Coxswain serves.
	GatewayControllerName = "coxswain.dev/gateway-controller"

	// CASecretName is the default name of the Secret holding the discovery CA (tls.crt, tls.key).
	CASecretName = "coxswain-discovery-ca"
	// TrustBundleConfigMapName is the ConfigMap that publishes the public CA roots.
	TrustBundleConfigMapName = "coxswain-discovery-trust"
	// TrustBundleKey is the key of TrustBundleConfigMapName that holds the PEM roots.
	TrustBundleKey = "ca.crt"

	// TokenAudience is the audience of the projected ServiceAccount token a proxy bootstraps with.
	TokenAudience = "coxswain-discovery"
	// TokenPath is where a proxy finds its projected ServiceAccount token.
	TokenPath = "/var/run/secrets/coxswain/discovery-token/token" //nolint:gosec // a file path, not a credential
	// TrustBundlePath is where a proxy finds the trust bundle.
	TrustBundlePath = "/var/run/secrets/coxswain/trust-bundle/ca.crt"
	// SnapshotCachePath is where a deployed proxy keeps its last good snapshot, on a
	// memory-backed volume (it holds listener private keys, so never on disk).
	SnapshotCachePath = "/var/run/coxswain/snapshot/last"

	// StreamPort is the default port of the mTLS snapshot stream listener.
	StreamPort = 50051
	// BootstrapPort is the default port of the server-authenticated bootstrap listener.
	BootstrapPort = 50052

	// DefaultTrustDomain is the SPIFFE trust domain used when none is configured.
	DefaultTrustDomain = "cluster.local"
	// DefaultSVIDTTL is the default lifetime of a proxy SVID; proxies renew at about half of it.
	DefaultSVIDTTL = 24 * time.Hour
	// MinSVIDTTL is the shortest configurable SVID lifetime; it exists to exercise rotation in
	// tests, production wants hours.
	MinSVIDTTL = time.Minute
	// MaxSVIDTTL is the longest configurable SVID lifetime.
	MaxSVIDTTL = 30 * 24 * time.Hour

	// DefaultMaxStreamsPerIdentity is how many live snapshot streams one proxy identity may hold
	// by default: the replicas of its Deployment plus the surge of a rollout.
	DefaultMaxStreamsPerIdentity = 32
	// MaxMaxStreamsPerIdentity is the largest configurable cap.
	MaxMaxStreamsPerIdentity = 4096

	// SharedProxyServiceAccount is the ServiceAccount of the shared proxy pool.
	SharedProxyServiceAccount = "coxswain-shared-proxy"
	// ControllerServiceAccount is the controller's ServiceAccount in the install namespace; the
	// controller's serving certificate carries its SPIFFE ID, which proxies authorize.
	ControllerServiceAccount = "coxswain-controller"
	// DiscoveryServiceName is the Service in front of the controller's discovery listeners; its
	// DNS names are in the controller's serving certificate.
	DiscoveryServiceName = "coxswain-discovery"

	// EventReasonBootstrapRejected is the reason of the Warning event for a refused bootstrap.
	EventReasonBootstrapRejected = "BootstrapRejected"
	// MaxEventNoteBytes is the most bytes of an event note the controller writes: the API
	// server refuses a note over 1 KiB, and the event with it.
	MaxEventNoteBytes = 1000
)

// CAMode says how the discovery CA is provisioned.
type CAMode string

const (
	// CAModeAuto generates and stores the CA on first start.
	CAModeAuto CAMode = "Auto"
	// CAModeExternal consumes an existing CA Secret and fails closed without it.
	CAModeExternal CAMode = "External"
)

// The internal ports of the shared pool. Each (shared Gateway, listener port) pair gets one
// port of this range, which its Service maps the listener port to; the pool binds the Gateway's
// listeners there, so the port a connection arrives on says which Gateway it is for. The range
// lies below the kernel's default ephemeral ports (32768 up) and above every port the pool
// itself uses.
const (
	SharedPoolFirstPort = 20000
	SharedPoolLastPort  = 29999
)

// The default caps of what the Gateways of one namespace may take of the shared pool: Gateways,
// and internal ports (one per distinct listener port of each). Without them one tenant could
// take every internal port, and every later Gateway would get none.
const (
	DefaultMaxSharedGatewaysPerNamespace = 64
	DefaultMaxSharedPortsPerNamespace    = 256
	// MaxSharedPoolLimit is the largest value of either cap: the size of the range.
	MaxSharedPoolLimit = SharedPoolLastPort - SharedPoolFirstPort + 1
)

// The default caps of the listeners that ListenerSets add to a Gateway (GEP-1713). Every
// listener of a Gateway port is a virtual host of one proxy listener, which every proxy serving
// the Gateway holds and the controller compiles; without them one tenant's ListenerSets could
// grow a port, a Gateway and the shared pool without end.
const (
	// DefaultMaxListenersPerPort caps the listeners of one Gateway port: its own first, then
	// its ListenerSets' in precedence order.
	DefaultMaxListenersPerPort = 1024
	// MinMaxListenersPerPort is the least value of that cap: a Gateway's own listeners (at most
	// 64) always fit.
	MinMaxListenersPerPort = 64
	// DefaultMaxListenerSetsPerGateway caps the ListenerSets attached to one Gateway, and
	// DefaultMaxListenerSetsPerNamespace those of one namespace attached to any Gateways: the
	// oldest are attached.
	DefaultMaxListenerSetsPerGateway   = 256
	DefaultMaxListenerSetsPerNamespace = 128
	// MaxListenerLimit is the largest value of these caps.
	MaxListenerLimit = 65536
)

// The cap of the encoded bytes the routes of one namespace take of one scope's snapshot (the
// shared pool's, or a dedicated Gateway's), every copy of a route counted: a route is copied
// into the route set of each listener and hostname it attaches to.
const (
	// DefaultMaxRouteBytesPerNamespace is an eighth of what one snapshot message may carry
	// (discoveryv1.MaxServerMessageBytes), so that no tenant alone can make a scope's snapshot
	// unsendable.
	DefaultMaxRouteBytesPerNamespace = 8 << 20
	// MinRouteBytesPerNamespace is the least a CoxswainConfig may set it to.
	MinRouteBytesPerNamespace = 64 << 10
)
