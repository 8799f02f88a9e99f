package snapshot

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"coxswain.dev/coxswain/internal/graph"
)

// ScopeKind says which proxies a snapshot is for.
type ScopeKind string

const (
	// ScopeSharedPool is the shared proxy pool, serving every Gateway without parameters.
	ScopeSharedPool ScopeKind = "SharedPool"
	// ScopeGateway is the dedicated proxy of one Gateway.
	ScopeGateway ScopeKind = "Gateway"
)

// Scope identifies the proxies a snapshot is for.
type Scope struct {
	Kind ScopeKind `json:"kind"`
	// Namespace and Name name the Gateway of a ScopeGateway scope.
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	// ProxyName is the name of a dedicated proxy's Deployment, Service and ServiceAccount.
	ProxyName string `json:"proxyName,omitempty"`
}

// SharedPool returns the scope of the shared proxy pool.
func SharedPool() Scope { return Scope{Kind: ScopeSharedPool} }

// String returns "shared-pool" or "gateway/<namespace>/<name>".
func (s Scope) String() string {
	if s.Kind == ScopeSharedPool {
		return "shared-pool"
	}
	return fmt.Sprintf("gateway/%s/%s", s.Namespace, s.Name)
}

// Snapshot is the complete routing configuration of one scope. Every slice is sorted, so equal
// inputs give equal snapshots.
type Snapshot struct {
	Scope     Scope       `json:"scope"`
	Listeners []*Listener `json:"listeners,omitempty"`
	Secrets   []*Secret   `json:"secrets,omitempty"`
	Clusters  []*Cluster  `json:"clusters,omitempty"`
}

// Listener is one port of one Gateway. The shared pool serves several Gateways, so listeners
// are keyed by Gateway and port: a Gateway's routes never answer on another Gateway's listener.
type Listener struct {
	// Name is "<namespace>/<gateway>/<port>", with the Gateway's listener port.
	Name    string `json:"name"`
	Gateway string `json:"gateway"`
	// Port is the port the proxy binds: the listener port on a dedicated proxy, the Gateway's
	// internal port on the shared pool, which the Gateway's Service maps the listener port to.
	Port     int32  `json:"port"`
	Protocol string `json:"protocol"`
	// VirtualHosts are the Gateway listeners on this port, most specific hostname first. A
	// request (and, for HTTPS, a handshake's SNI) selects the first virtual host whose hostname
	// matches; when none does the answer is 404.
	VirtualHosts []*VirtualHost `json:"virtualHosts"`
	// ClientValidation, on an HTTPS listener, makes the proxy ask every client for a certificate
	// and verify it against the CA certificates it holds (the Gateway's spec.tls.frontend for
	// the port). Public material only.
	ClientValidation *graph.FrontendValidation `json:"clientValidation,omitempty"`
}

// VirtualHost is one Gateway listener (section) on a port.
type VirtualHost struct {
	// Name is the Gateway listener's name.
	Name string `json:"name"`
	// Hostname is exact ("a.example.com"), a wildcard ("*.example.com": any host with at least
	// one more label) or empty (any host).
	Hostname string `json:"hostname,omitempty"`
	// Certificates name the Secrets to serve for HTTPS, in certificateRefs order.
	Certificates []string `json:"certificates,omitempty"`
	// Routes are in precedence order: the first route whose hostname and match fit the request
	// handles it; when none fits the answer is 404.
	Routes []*Route `json:"routes,omitempty"`
}

// Secret is a TLS certificate chain and private key from a kubernetes.io/tls Secret.
type Secret struct {
	// Name is "<namespace>/<name>".
	Name             string      `json:"name"`
	CertificateChain string      `json:"certificateChain"`
	PrivateKey       SecretBytes `json:"privateKey"`
}

// Cluster is a Service port with its ready endpoints. A cluster without endpoints answers 503.
type Cluster struct {
	// Name is "<namespace>/<service>:<port>".
	Name      string           `json:"name"`
	Protocol  UpstreamProtocol `json:"protocol"`
	Endpoints []Endpoint       `json:"endpoints,omitempty"`
	// TLS, when set, makes the proxy reach the endpoints over TLS only (BackendTLSPolicy). It
	// holds public material only: a hostname, names and CA certificates.
	TLS *graph.BackendTLS `json:"tls,omitempty"`
	// ClientCertificate, set only with a usable TLS, is the key pair the proxy presents to the
	// endpoints: the backend clientCertificateRef of the Gateways of the scope that use the
	// cluster, when they all name the same one.
	ClientCertificate *Secret `json:"clientCertificate,omitempty"`
}

// UpstreamProtocol is the protocol a cluster's endpoints speak.
type UpstreamProtocol string

const (
	// UpstreamHTTP1 is HTTP/1.1: any appProtocol other than kubernetes.io/h2c, or none.
	UpstreamHTTP1 UpstreamProtocol = "HTTP/1.1"
	// UpstreamH2C is HTTP/2 without TLS, with prior knowledge.
	UpstreamH2C UpstreamProtocol = "H2C"
	// UpstreamH2 is HTTP/2 over TLS, negotiated with ALPN h2; only with backend TLS.
	UpstreamH2 UpstreamProtocol = "H2"
)

// Endpoint is one ready address and target port.
type Endpoint struct {
	Address string `json:"address"`
	Port    int32  `json:"port"`
}

// Retry is a route rule's retry stanza: another attempt after a connection failure, a backend
// request timeout, or a response with one of Codes, at most Attempts times, waiting at least
// Backoff (the proxy's default when nil) before each.
type Retry struct {
	Codes    []int            `json:"codes,omitempty"`
	Attempts int              `json:"attempts"`
	Backoff  *metav1.Duration `json:"backoff,omitempty"`
}

// Timeouts bound a request; nil means unset, zero means disabled.
type Timeouts struct {
	Request        *metav1.Duration `json:"request,omitempty"`
	BackendRequest *metav1.Duration `json:"backendRequest,omitempty"`
}
