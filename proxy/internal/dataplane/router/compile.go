package router

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"iter"
	"net"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
)

// ErrInvalid reports a resource set the data plane refuses; the agent NACKs it and the last
// good table keeps serving.
var ErrInvalid = errors.New("invalid routing resource")

// Resource key prefixes; the rest of a key is the payload's name.
const (
	ListenerKeyPrefix    = "listener/"
	ClusterKeyPrefix     = "cluster/"
	CertificateKeyPrefix = "certificate/"
)

// decoded is a resource set sorted into its three kinds, in key order.
type decoded struct {
	listeners    []*discoveryv1.Listener
	clusters     []*discoveryv1.Cluster
	certificates []*discoveryv1.Certificate
}

// Compile validates a complete resource set, given as key and payload pairs, and builds its
// table. It refuses unknown payload types, keys that do not name their payload, duplicates,
// bad regular expressions, unparsable certificates and values out of range; a route whose
// backend names a cluster the set lacks is valid and answers that backend's share with 500.
func Compile(resources iter.Seq2[string, *anypb.Any]) (*Table, error) {
	d, err := decode(resources)
	if err != nil {
		return nil, err
	}
	c := &compiler{
		table:        &Table{ports: map[uint32]*Port{}},
		clusters:     map[string]*Cluster{},
		certificates: map[string]*Certificate{},
	}
	var errs []error
	for _, cl := range d.clusters {
		errs = append(errs, c.cluster(cl))
	}
	for _, cert := range d.certificates {
		errs = append(errs, c.certificate(cert))
	}
	for _, l := range d.listeners {
		errs = append(errs, c.listener(l))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c.table, nil
}

func decode(resources iter.Seq2[string, *anypb.Any]) (*decoded, error) {
	d := &decoded{}
	seen := map[string]bool{}
	var errs []error
	for key, payload := range resources {
		if seen[key] {
			errs = append(errs, fmt.Errorf("%w: key %q appears twice", ErrInvalid, key))
			continue
		}
		seen[key] = true
		if err := d.add(key, payload); err != nil {
			errs = append(errs, fmt.Errorf("resource %q: %w", key, err))
		}
	}
	byName := func(a, b interface{ GetName() string }) int { return cmp.Compare(a.GetName(), b.GetName()) }
	slices.SortFunc(d.listeners, func(a, b *discoveryv1.Listener) int { return byName(a, b) })
	slices.SortFunc(d.clusters, func(a, b *discoveryv1.Cluster) int { return byName(a, b) })
	slices.SortFunc(d.certificates, func(a, b *discoveryv1.Certificate) int { return byName(a, b) })
	return d, errors.Join(errs...)
}

func (d *decoded) add(key string, payload *anypb.Any) error {
	msg, err := payload.UnmarshalNew()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	switch m := msg.(type) {
	case *discoveryv1.Listener:
		d.listeners = append(d.listeners, m)
		return checkKey(key, ListenerKeyPrefix, m.GetName())
	case *discoveryv1.Cluster:
		d.clusters = append(d.clusters, m)
		return checkKey(key, ClusterKeyPrefix, m.GetName())
	case *discoveryv1.Certificate:
		d.certificates = append(d.certificates, m)
		return checkKey(key, CertificateKeyPrefix, m.GetName())
	}
	return fmt.Errorf("%w: unknown payload type %s", ErrInvalid, proto.MessageName(msg))
}

func checkKey(key, prefix, name string) error {
	if name == "" || key != prefix+name {
		return fmt.Errorf("%w: key does not name its payload %q", ErrInvalid, name)
	}
	return nil
}

type compiler struct {
	table        *Table
	clusters     map[string]*Cluster
	certificates map[string]*Certificate
}

func (c *compiler) cluster(in *discoveryv1.Cluster) error {
	out := &Cluster{Name: in.GetName(), Index: len(c.table.clusters)}
	switch p := in.GetUpstreamProtocol(); {
	case p == discoveryv1.UpstreamProtocol_UPSTREAM_PROTOCOL_UNSPECIFIED, p == discoveryv1.UpstreamProtocol_UPSTREAM_PROTOCOL_HTTP1:
	case p == discoveryv1.UpstreamProtocol_UPSTREAM_PROTOCOL_H2C && in.GetTls() == nil:
		out.H2C = true
	case p == discoveryv1.UpstreamProtocol_UPSTREAM_PROTOCOL_H2 && in.GetTls() != nil:
	default:
		return fmt.Errorf("cluster %s: %w: upstream protocol %s (tls %t)", out.Name, ErrInvalid, p, in.GetTls() != nil)
	}
	if in.GetTls() != nil {
		t, err := backendTLS(in.GetTls(), in.GetUpstreamProtocol() == discoveryv1.UpstreamProtocol_UPSTREAM_PROTOCOL_H2)
		if err != nil {
			return fmt.Errorf("cluster %s: %w", out.Name, err)
		}
		out.TLS = t
	}
	for _, ep := range in.GetEndpoints() {
		if ep.GetAddress() == "" || ep.GetPort() == 0 || ep.GetPort() > 65535 {
			return fmt.Errorf("cluster %s: %w: endpoint %q port %d", out.Name, ErrInvalid, ep.GetAddress(), ep.GetPort())
		}
		out.Endpoints = append(out.Endpoints, Endpoint{
			Address: net.JoinHostPort(ep.GetAddress(), strconv.FormatUint(uint64(ep.GetPort()), 10)),
		})
	}
	c.table.clusters = append(c.table.clusters, out)
	c.clusters[out.Name] = out
	return nil
}

func (c *compiler) certificate(in *discoveryv1.Certificate) error {
	cert, err := tls.X509KeyPair(in.GetCertificateChainPem(), in.GetPrivateKeyPem())
	if err != nil {
		return fmt.Errorf("certificate %s: %w: %w", in.GetName(), ErrInvalid, err)
	}
	c.certificates[in.GetName()] = &Certificate{Name: in.GetName(), TLS: &cert}
	return nil
}

func (c *compiler) listener(in *discoveryv1.Listener) error {
	name := in.GetName()
	proto, err := protocol(in.GetProtocol())
	if err != nil || in.GetPort() == 0 || in.GetPort() > 65535 {
		return fmt.Errorf("listener %s: %w: port %d protocol %s", name, ErrInvalid, in.GetPort(), in.GetProtocol())
	}
	var vhosts []*VirtualHost
	var errs []error
	for _, vh := range in.GetVirtualHosts() {
		out, err := c.virtualHost(name, proto, vh)
		errs = append(errs, err)
		vhosts = append(vhosts, out)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("listener %s: %w", name, err)
	}
	c.port(in.GetPort(), proto, name, vhosts)
	return nil
}

func protocol(p discoveryv1.Protocol) (Protocol, error) {
	switch p {
	case discoveryv1.Protocol_PROTOCOL_HTTP:
		return HTTP, nil
	case discoveryv1.Protocol_PROTOCOL_HTTPS:
		return HTTPS, nil
	}
	return 0, ErrInvalid
}

// port adds a listener's virtual hosts to its port, creating the port for the first listener
// and skipping a listener whose protocol differs from the port's.
func (c *compiler) port(n uint32, proto Protocol, listener string, vhosts []*VirtualHost) {
	p, ok := c.table.ports[n]
	if !ok {
		p = &Port{Number: n, Protocol: proto, hosts: newHostIndex[*VirtualHost]()}
		c.table.ports[n] = p
	}
	if p.Protocol != proto {
		c.table.Skipped = append(c.table.Skipped, listener)
		return
	}
	p.Listeners = append(p.Listeners, listener)
	for _, vh := range vhosts {
		p.vhosts = append(p.vhosts, vh)
		p.hosts.put(vh.Hostname, vh)
		if len(vh.Certificates) > 0 && (p.defaultHost == nil || (vh.Hostname == "" && p.defaultHost.Hostname != "")) {
			p.defaultHost = vh
		}
	}
}

func (c *compiler) virtualHost(listener string, proto Protocol, in *discoveryv1.VirtualHost) (*VirtualHost, error) {
	out := &VirtualHost{
		Name: in.GetName(), Listener: listener, Hostname: strings.ToLower(in.GetHostname()),
		hosts: newHostIndex[*pathIndex](),
	}
	if err := checkHostname(out.Hostname); err != nil {
		return nil, fmt.Errorf("virtual host %s: %w", out.Name, err)
	}
	for _, name := range in.GetCertificates() {
		cert, ok := c.certificates[name]
		if !ok {
			return nil, fmt.Errorf("virtual host %s: %w: certificate %s is not in the set", out.Name, ErrInvalid, name)
		}
		out.Certificates = append(out.Certificates, cert)
	}
	if proto == HTTPS && len(out.Certificates) == 0 {
		return nil, fmt.Errorf("virtual host %s: %w: HTTPS without a certificate", out.Name, ErrInvalid)
	}
	var errs []error
	for i, r := range in.GetRoutes() {
		route, err := c.route(r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		route.order = i
		out.routes = append(out.routes, route)
		out.index(route)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("virtual host %s: %w", out.Name, err)
	}
	return out, nil
}

func (vh *VirtualHost) index(r *Route) {
	pi, ok := vh.hosts.get(r.hostname)
	if !ok {
		pi = newPathIndex()
		vh.hosts.put(r.hostname, pi)
	}
	pi.add(r)
}

func checkHostname(h string) error {
	rest := strings.TrimPrefix(h, "*.")
	if strings.ContainsAny(rest, "*:/ ") || (h != "" && rest == "") {
		return fmt.Errorf("%w: hostname %q", ErrInvalid, h)
	}
	return nil
}
