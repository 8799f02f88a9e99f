package router

import (
	"crypto/tls"
	"slices"
)

// Protocol is what a port accepts.
type Protocol int

// Protocols.
const (
	HTTP Protocol = iota + 1
	HTTPS
)

func (p Protocol) String() string {
	if p == HTTPS {
		return "HTTPS"
	}
	return "HTTP"
}

// Table is one compiled resource set. It is immutable once built and safe for any number of
// concurrent readers.
type Table struct {
	ports    map[uint32]*Port
	clusters []*Cluster
	// Skipped lists the listeners that were not given a port because another listener with a
	// different protocol holds it (see Port).
	Skipped []string
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
}

// Certificate is a parsed TLS certificate with its key.
type Certificate struct {
	Name string
	TLS  *tls.Certificate
}

// Cluster is a set of endpoints. Index is the cluster's position in Table.Clusters, stable for
// one table, so per-cluster state can live in a slice.
type Cluster struct {
	Name      string
	Index     int
	Endpoints []Endpoint
	// H2C says the endpoints speak HTTP/2 without TLS (the cluster's upstream protocol is
	// UPSTREAM_PROTOCOL_H2C).
	H2C bool
	// TLS, when set, says the endpoints are reached over TLS only, as it describes.
	TLS *BackendTLS
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

// Clusters returns the clusters by Index; the slice must not be modified.
func (t *Table) Clusters() []*Cluster { return t.clusters }

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

// CertificateVirtualHost returns the virtual host whose certificates a handshake naming
// serverName gets: the virtual host serving that name, else the port's default (the catch-all
// virtual host, else the first one).
func (p *Port) CertificateVirtualHost(serverName string) *VirtualHost {
	if vh, ok := p.hosts.lookup(NormalizeHost(serverName)); ok && len(vh.Certificates) > 0 {
		return vh
	}
	return p.defaultHost
}
