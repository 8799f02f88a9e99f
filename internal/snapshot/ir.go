package snapshot

import (
	"fmt"
	"slices"
	"strings"

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
	// hosts groups Routes by hostname (see Hosts).
	hosts []*HostRoutes
}

// HostRoutes are the routes of a virtual host for one route hostname, in the virtual host's
// order: what one route set carries. A compile with a Memo hands back the very same value while
// the group's routes stay the same.
type HostRoutes struct {
	Hostname string
	Routes   []*Route
}

// Hosts returns the virtual host's routes grouped by hostname, in hostname byte order. The
// virtual hosts a compile makes hold them; for any other (one decoded from JSON) they are
// grouped at each call.
func (vh *VirtualHost) Hosts() []*HostRoutes {
	if vh.hosts == nil && len(vh.Routes) > 0 {
		return groupHosts(vh.Routes)
	}
	return vh.hosts
}

// groupHosts groups routes by hostname, each group in the order of routes, the groups in
// hostname byte order.
func groupHosts(routes []*Route) []*HostRoutes {
	var out []*HostRoutes
	byHost := map[string]*HostRoutes{}
	for _, r := range routes {
		g := byHost[r.Hostname]
		if g == nil {
			g = &HostRoutes{Hostname: r.Hostname}
			byHost[r.Hostname] = g
			out = append(out, g)
		}
		g.Routes = append(g.Routes, r)
	}
	slices.SortFunc(out, func(a, b *HostRoutes) int { return strings.Compare(a.Hostname, b.Hostname) })
	return out
}

// regroupHosts returns prev, the groups of a virtual host before a change, with the groups of
// the hostnames in changed (sorted, distinct) made again from entries, the virtual host's
// entries after it: those groups new, emptied ones gone, every other the very same value. It
// walks entries once, comparing hostnames with changed one by one when few.
func regroupHosts(prev []*HostRoutes, entries []entry, changed []string) []*HostRoutes {
	fresh := make([]*HostRoutes, len(changed))
	for i, h := range changed {
		fresh[i] = &HostRoutes{Hostname: h}
	}
	var index map[string]int
	hashes := make([]uint64, len(changed))
	if len(changed) > graph.FewMarks {
		index = make(map[string]int, len(changed))
		for i, h := range changed {
			index[h] = i
		}
	} else {
		for i, h := range changed {
			hashes[i] = stringHash(h)
		}
	}
	for i := range entries {
		e := &entries[i]
		at := -1
		if index != nil {
			if j, ok := index[e.route.Hostname]; ok {
				at = j
			}
		} else {
			for j, h := range hashes {
				if h == e.hostHash && changed[j] == e.route.Hostname {
					at = j
					break
				}
			}
		}
		if at >= 0 {
			fresh[at].Routes = append(fresh[at].Routes, e.route)
		}
	}
	out := make([]*HostRoutes, 0, len(prev)+len(changed))
	add := func(f *HostRoutes) {
		if len(f.Routes) > 0 {
			out = append(out, f)
		}
	}
	i := 0
	for _, g := range prev {
		for i < len(fresh) && fresh[i].Hostname < g.Hostname {
			add(fresh[i])
			i++
		}
		if i < len(fresh) && fresh[i].Hostname == g.Hostname {
			add(fresh[i]) // made again, or gone when emptied
			i++
			continue
		}
		out = append(out, g)
	}
	for _, f := range fresh[i:] {
		add(f)
	}
	return out
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
