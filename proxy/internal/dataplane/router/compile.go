package router

import (
	"crypto/tls"
	"errors"
	"fmt"
	"iter"
	"net"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/anypb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
)

// ErrInvalid reports a resource set the data plane refuses; the agent NACKs it and the last
// good table keeps serving.
var ErrInvalid = errors.New("invalid routing resource")

// Resource key prefixes; the rest of a key is the payload's name. Route sets have theirs in
// routeset.KeyPrefix.
const (
	ListenerKeyPrefix    = discoveryv1.ListenerKeyPrefix
	ClusterKeyPrefix     = discoveryv1.ClusterKeyPrefix
	CertificateKeyPrefix = discoveryv1.CertificateKeyPrefix
)

// Compile validates a complete resource set, given as key and payload pairs, and builds its
// table. It refuses unknown payload types, keys that do not name their payload, duplicates,
// bad regular expressions, unparsable certificates and values out of range; a route whose
// backend names a cluster the set lacks is valid and answers that backend's share with 500.
func Compile(resources iter.Seq2[string, *anypb.Any]) (*Table, error) {
	return Update(nil, resources)
}

// compiler builds one table, from scratch or from the table before it (prev, empty for a
// scratch compile).
type compiler struct {
	prev  *Table
	table *Table
	// moved names the clusters added or removed since prev: a route naming one compiles anew.
	moved map[string]bool
	// certsChanged names the certificates added, removed or changed since prev.
	certsChanged map[string]bool
}

func compileCluster(in *discoveryv1.Cluster, ref *ClusterRef) (*Cluster, error) {
	out := &Cluster{Name: in.GetName(), Index: ref.Index, ref: ref}
	switch p := in.GetUpstreamProtocol(); {
	case p == discoveryv1.UpstreamProtocol_UPSTREAM_PROTOCOL_UNSPECIFIED, p == discoveryv1.UpstreamProtocol_UPSTREAM_PROTOCOL_HTTP1:
	case p == discoveryv1.UpstreamProtocol_UPSTREAM_PROTOCOL_H2C && in.GetTls() == nil:
		out.H2C = true
	case p == discoveryv1.UpstreamProtocol_UPSTREAM_PROTOCOL_H2 && in.GetTls() != nil:
	default:
		return nil, fmt.Errorf("cluster %s: %w: upstream protocol %s (tls %t)", out.Name, ErrInvalid, p, in.GetTls() != nil)
	}
	if in.GetTls() != nil {
		t, err := backendTLS(in.GetTls(), in.GetUpstreamProtocol() == discoveryv1.UpstreamProtocol_UPSTREAM_PROTOCOL_H2)
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w", out.Name, err)
		}
		out.TLS = t
	}
	for _, ep := range in.GetEndpoints() {
		if ep.GetAddress() == "" || ep.GetPort() == 0 || ep.GetPort() > 65535 {
			return nil, fmt.Errorf("cluster %s: %w: endpoint %q port %d", out.Name, ErrInvalid, ep.GetAddress(), ep.GetPort())
		}
		out.Endpoints = append(out.Endpoints, Endpoint{
			Address: net.JoinHostPort(ep.GetAddress(), strconv.FormatUint(uint64(ep.GetPort()), 10)),
		})
	}
	return out, nil
}

func compileCertificate(in *discoveryv1.Certificate) (*Certificate, error) {
	cert, err := tls.X509KeyPair(in.GetCertificateChainPem(), in.GetPrivateKeyPem())
	if err != nil {
		return nil, fmt.Errorf("certificate %s: %w: %w", in.GetName(), ErrInvalid, err)
	}
	return &Certificate{Name: in.GetName(), TLS: &cert}, nil
}

// listener compiles a decoded listener whole.
func (c *compiler) listener(in *discoveryv1.Listener, src *anypb.Any) (*compiledListener, error) {
	name := in.GetName()
	proto, err := listenerProtocol(in)
	if err != nil {
		return nil, err
	}
	validation, err := clientValidation(in, proto)
	if err != nil {
		return nil, err
	}
	var vhosts []*VirtualHost
	var errs []error
	for _, vh := range in.GetVirtualHosts() {
		out, err := c.virtualHost(name, proto, vh)
		errs = append(errs, err)
		vhosts = append(vhosts, out)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("listener %s: %w", name, err)
	}
	l := &compiledListener{name: name, src: src, port: in.GetPort(), proto: proto, vhosts: vhosts, validation: validation}
	l.locateRoutes()
	return l, nil
}

// listenerProtocol checks a listener's port and returns its protocol.
func listenerProtocol(in *discoveryv1.Listener) (Protocol, error) {
	proto, err := protocol(in.GetProtocol())
	if err != nil || in.GetPort() == 0 || in.GetPort() > 65535 {
		return 0, fmt.Errorf("listener %s: %w: port %d protocol %s", in.GetName(), ErrInvalid, in.GetPort(), in.GetProtocol())
	}
	return proto, nil
}

func protocol(p discoveryv1.Protocol) (Protocol, error) {
	switch p {
	case discoveryv1.Protocol_PROTOCOL_HTTP:
		return HTTP, nil
	case discoveryv1.Protocol_PROTOCOL_HTTPS:
		return HTTPS, nil
	case discoveryv1.Protocol_PROTOCOL_TLS_PASSTHROUGH:
		return TLSPassthrough, nil
	case discoveryv1.Protocol_PROTOCOL_TCP:
		return TCP, nil
	case discoveryv1.Protocol_PROTOCOL_UDP:
		return UDP, nil
	case discoveryv1.Protocol_PROTOCOL_TLS:
		return TLS, nil
	}
	return 0, ErrInvalid
}

// buildPort gathers the virtual hosts of a port's listeners, in name order: the first
// listener sets the port's protocol and a listener with another protocol is skipped.
func buildPort(n uint32, members []*compiledListener) *Port {
	p := &Port{Number: n, Protocol: members[0].proto, hosts: newHostIndex[*VirtualHost](), members: members}
	for _, l := range members {
		if l.proto != p.Protocol {
			continue
		}
		p.Listeners = append(p.Listeners, l.name)
		if l.validation != nil {
			if p.validation == nil {
				p.validation = map[string]*ClientValidation{}
			}
			p.validation[l.name] = l.validation
		}
		for _, vh := range l.vhosts {
			p.vhosts = append(p.vhosts, vh)
			p.hosts.put(vh.Hostname, vh)
			if len(vh.Certificates) > 0 && (p.defaultHost == nil || (vh.Hostname == "" && p.defaultHost.Hostname != "")) {
				p.defaultHost = vh
			}
		}
	}
	return p
}

// virtualHost compiles a decoded virtual host whole.
func (c *compiler) virtualHost(listener string, proto Protocol, in *discoveryv1.VirtualHost) (*VirtualHost, error) {
	out, err := c.vhostHeader(listener, proto, in)
	if err != nil {
		return nil, err
	}
	out.hosts, out.refs = newHostIndex[*pathIndex](), map[string]int{}
	var errs []error
	for i, r := range in.GetRoutes() {
		route, err := c.route(r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		route.order = int64(i+1) * orderGap
		out.routes = append(out.routes, route)
		out.index(route)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("virtual host %s: %w", out.Name, err)
	}
	return out, nil
}

// vhostHeader compiles what a virtual host holds besides its routes.
func (c *compiler) vhostHeader(listener string, proto Protocol, in *discoveryv1.VirtualHost) (*VirtualHost, error) {
	out := &VirtualHost{Name: in.GetName(), Listener: listener, Hostname: strings.ToLower(in.GetHostname())}
	if err := checkHostname(out.Hostname); err != nil {
		return nil, fmt.Errorf("virtual host %s: %w", out.Name, err)
	}
	certs, err := c.lookupCertificates(out.Name, in.GetCertificates())
	if err != nil {
		return nil, err
	}
	out.Certificates = certs
	switch {
	case proto == HTTPS && len(out.Certificates) == 0:
		return nil, fmt.Errorf("virtual host %s: %w: HTTPS without a certificate", out.Name, ErrInvalid)
	case len(out.Certificates) > 0 && proto != HTTPS && proto != TLS:
		// A passthrough, TCP or UDP port decrypts nothing: certificates there say the sender
		// meant another protocol.
		return nil, fmt.Errorf("virtual host %s: %w: certificates on a %s port", out.Name, ErrInvalid, proto)
	}
	return out, nil
}

func (c *compiler) lookupCertificates(vhost string, names []string) ([]*Certificate, error) {
	var out []*Certificate
	for _, name := range names {
		cert, ok := c.table.certificates[name]
		if !ok {
			return nil, fmt.Errorf("virtual host %s: %w: certificate %s is not in the set", vhost, ErrInvalid, name)
		}
		out = append(out, cert)
	}
	return out, nil
}

// index adds r to the virtual host's host and path indexes and counts the clusters it names.
func (vh *VirtualHost) index(r *Route) {
	pi, ok := vh.hosts.get(r.hostname)
	if !ok {
		pi = newPathIndex()
		vh.hosts.put(r.hostname, pi)
	}
	pi.add(r)
	for _, name := range r.refs {
		vh.refs[name]++
	}
}

func checkHostname(h string) error {
	rest := strings.TrimPrefix(h, "*.")
	if strings.ContainsAny(rest, "*:/ ") || (h != "" && rest == "") {
		return fmt.Errorf("%w: hostname %q", ErrInvalid, h)
	}
	return nil
}
