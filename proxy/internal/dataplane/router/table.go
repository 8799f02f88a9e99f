package router

import (
	"crypto/tls"
	"slices"

	"google.golang.org/protobuf/types/known/anypb"
)

// Protocol is what a port accepts.
type Protocol int

// Protocols.
const (
	HTTP Protocol = iota + 1
	HTTPS
	// TLSPassthrough routes TLS connections by their ClientHello's server name without
	// terminating them (see Port.PassthroughRoute).
	TLSPassthrough
	// TCP forwards connections as they come to the route a nameless ClientHello would take on
	// a TLSPassthrough port.
	TCP
	// UDP forwards datagrams, a flow per client address, to that route too.
	UDP
	// TLS routes TLS connections by server name as TLSPassthrough does; a virtual host with
	// certificates terminates them (see Port.PassthroughRoute).
	TLS
)

func (p Protocol) String() string {
	switch p {
	case HTTPS:
		return "HTTPS"
	case TLSPassthrough:
		return "TLSPassthrough"
	case TCP:
		return "TCP"
	case UDP:
		return "UDP"
	case TLS:
		return "TLS"
	}
	return "HTTP"
}

// Table is one compiled resource set. It is immutable once built and safe for any number of
// concurrent readers. A table that Update derives from another shares with it every compiled
// piece whose resource did not change.
type Table struct {
	ports map[uint32]*Port
	// clusters is indexed by slot (Cluster.Index); a slot whose cluster left is nil until a new
	// cluster takes it.
	clusters []*Cluster
	// Skipped lists the listeners that were not given a port because another listener with a
	// different protocol holds it (see Port).
	Skipped []string

	// What Update reuses, by resource name.
	listeners    map[string]*compiledListener
	clusterNames map[string]*Cluster
	certificates map[string]*Certificate
	// assembled holds the listeners that came with route sets, by name.
	assembled map[string]assembly
}

// compiledListener is one Listener resource: its virtual hosts are compiled even when the
// listener is skipped.
type compiledListener struct {
	name   string
	src    *anypb.Any
	port   uint32
	proto  Protocol
	vhosts []*VirtualHost
	// validation is the listener's client certificate validation, nil for none.
	validation *ClientValidation
}

// Port is one bound port. Several Gateways of the shared pool may listen on the same port with
// the same protocol; their virtual hosts then share the port's host index, the most specific
// hostname winning and, between equal hostnames, the listener whose key sorts first. A listener
// with another protocol than the port's first listener is skipped.
type Port struct {
	Number    uint32
	Protocol  Protocol
	Listeners []string
	vhosts    []*VirtualHost
	hosts     hostIndex[*VirtualHost]
	// defaultHost serves the certificates of a handshake whose server name matches nothing.
	defaultHost *VirtualHost
	// members are the listeners on the port, skipped ones included, in name order.
	members []*compiledListener
	// validation maps the listeners on the port that validate client certificates to how.
	validation map[string]*ClientValidation
}

// VirtualHost is one Gateway listener section on a port.
type VirtualHost struct {
	Name string
	// Listener is the name of the Listener resource ("<namespace>/<gateway>/<port>").
	Listener     string
	Hostname     string
	Certificates []*Certificate
	routes       []*Route
	hosts        hostIndex[*pathIndex]
	// src is the virtual host's encoding and spans locate each route's encoding in it, so
	// Update recompiles only the routes whose bytes changed; src is nil when the encoding could
	// not be split (Update then recompiles the virtual host whenever its listener changes).
	src   []byte
	spans []span
	// refs counts the routes naming each cluster, present or not.
	refs map[string]int
}

// Certificate is a parsed TLS certificate with its key.
type Certificate struct {
	Name string
	TLS  *tls.Certificate
	src  *anypb.Any
}

// Cluster is a set of endpoints. Index is the cluster's slot in Table.Clusters, so per-cluster
// state can live in a slice. A cluster keeps its slot in every table Update derives while it
// stays in the set, whatever its endpoints do.
type Cluster struct {
	Name      string
	Index     int
	Endpoints []Endpoint
	// H2C says the endpoints speak HTTP/2 without TLS (the cluster's upstream protocol is
	// UPSTREAM_PROTOCOL_H2C).
	H2C bool
	// TLS, when set, says the endpoints are reached over TLS only, as it describes.
	TLS *BackendTLS
	src *anypb.Any
	ref *ClusterRef
}

// ClusterRef is how a route names a cluster of its table: Index is the cluster's slot. It
// outlives changes of the cluster's endpoints, so routes need not be recompiled for them; the
// cluster itself is Table.Cluster(ref).
type ClusterRef struct {
	Name  string
	Index int
	// names is []string{Name} with capacity one, the refs of the routes naming only this
	// cluster.
	names []string
}

func newClusterRef(name string, index int) *ClusterRef {
	return &ClusterRef{Name: name, Index: index, names: []string{name}[:1:1]}
}

// Endpoint is one address to forward to.
type Endpoint struct {
	// Address is "host:port", ready to dial.
	Address string
}

// Port returns the port numbered n.
func (t *Table) Port(n uint32) (*Port, bool) {
	p, ok := t.ports[n]
	return p, ok
}

// Ports returns the ports in ascending order.
func (t *Table) Ports() []*Port {
	out := make([]*Port, 0, len(t.ports))
	for _, p := range t.ports {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *Port) int { return int(a.Number) - int(b.Number) })
	return out
}

// Clusters returns the clusters by Index, nil at a free slot; the slice must not be modified.
func (t *Table) Clusters() []*Cluster { return t.clusters }

// ClusterCount returns the number of clusters.
func (t *Table) ClusterCount() int { return len(t.clusterNames) }

// Cluster returns the cluster a route's backend or mirror names.
func (t *Table) Cluster(ref *ClusterRef) *Cluster { return t.clusters[ref.Index] }

// Routes returns the number of routes in the table.
func (t *Table) Routes() int {
	n := 0
	for _, p := range t.ports {
		for _, vh := range p.vhosts {
			n += len(vh.routes)
		}
	}
	return n
}

// VirtualHosts returns the port's virtual hosts in listener and precedence order.
func (p *Port) VirtualHosts() []*VirtualHost { return p.vhosts }

// VirtualHost returns the virtual host serving host (normalized, see NormalizeHost).
func (p *Port) VirtualHost(host string) (*VirtualHost, bool) {
	return p.hosts.lookup(host)
}

// PassthroughRoute returns the route of a TLSPassthrough or TLS port for a ClientHello naming
// serverName (empty when it names none), and the virtual host it is in: the route a request for
// that host and path "/" would take, in the virtual host serving the name, with any hostname,
// path, method, header and query conditions as for a request (the controller sends none but the
// hostname). Only its backends count. On a TLS port, the connection is terminated with the
// virtual host's certificates when it has any. The route is nil when none takes the name.
func (p *Port) PassthroughRoute(serverName string) (*VirtualHost, *Route) {
	host := NormalizeHost(serverName)
	vh, ok := p.hosts.lookup(host)
	if !ok {
		return nil, nil
	}
	return vh, vh.Match(host, "", "/", noRequest{})
}

// noRequest is the Request of a connection routed without an HTTP request: it has no header
// and no query parameter.
type noRequest struct{}

func (noRequest) Header(string) (string, bool) { return "", false }
func (noRequest) Query(string) (string, bool)  { return "", false }

// CertificateVirtualHost returns the virtual host whose certificates a handshake naming
// serverName gets: the virtual host serving that name, else the port's default (the catch-all
// virtual host, else the first one).
func (p *Port) CertificateVirtualHost(serverName string) *VirtualHost {
	if vh, ok := p.hosts.lookup(NormalizeHost(serverName)); ok && len(vh.Certificates) > 0 {
		return vh
	}
	return p.defaultHost
}
