package encode

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/snapshot"
)

// Resource key prefixes; the rest of a key is the IR object's name, or for a RouteSet what
// routeset.Key makes of its listener, virtual host and hostname.
const (
	ListenerKeyPrefix    = discoveryv1.ListenerKeyPrefix
	RouteSetKeyPrefix    = discoveryv1.RouteSetKeyPrefix
	ClusterKeyPrefix     = discoveryv1.ClusterKeyPrefix
	CertificateKeyPrefix = discoveryv1.CertificateKeyPrefix
)

// Encoded is one scope's snapshot in wire form.
type Encoded struct {
	Scope cache.Scope
	// Resources are sorted by key.
	Resources []*discoveryv1.Resource
	// Version is the content hash of Resources, as the discovery cache computes it.
	Version string
	// Snapshot is Resources sorted and hashed, ready for cache.SetSnapshot: publishing it does
	// not hash the resources a second time.
	Snapshot *cache.Snapshot `json:"-"`
}

// Scope converts a snapshot scope to the discovery cache's.
func Scope(s snapshot.Scope) cache.Scope {
	if s.Kind == snapshot.ScopeGateway {
		return cache.Gateway(s.Namespace, s.Name)
	}
	return cache.SharedPool()
}

// All encodes every snapshot, in order.
func All(snaps []*snapshot.Snapshot) ([]*Encoded, error) {
	out := make([]*Encoded, 0, len(snaps))
	for _, s := range snaps {
		e, err := Snapshot(s)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// Snapshot encodes one scope's snapshot: each listener without its routes, which come in
// RouteSets, one per virtual host and route hostname (see discovery/routeset); the discovery
// server assembles them back for a proxy that does not take route sets.
func Snapshot(s *snapshot.Snapshot) (*Encoded, error) {
	var resources []*discoveryv1.Resource
	add := func(key string, msg proto.Message) error {
		r, err := cache.NewResource(key, msg)
		if err != nil {
			return err
		}
		resources = append(resources, r)
		return nil
	}
	for _, l := range s.Listeners {
		if err := add(ListenerKeyPrefix+l.Name, listenerHead(l)); err != nil {
			return nil, fmt.Errorf("encode %s: %w", s.Scope, err)
		}
		for _, g := range routeGroups(l) {
			if err := add(g.key, routeSet(l, g, route)); err != nil {
				return nil, fmt.Errorf("encode %s: %w", s.Scope, err)
			}
		}
	}
	for _, c := range s.Clusters {
		if err := add(ClusterKeyPrefix+c.Name, Cluster(c)); err != nil {
			return nil, fmt.Errorf("encode %s: %w", s.Scope, err)
		}
	}
	for _, c := range s.Secrets {
		if err := add(CertificateKeyPrefix+c.Name, Certificate(c)); err != nil {
			return nil, fmt.Errorf("encode %s: %w", s.Scope, err)
		}
	}
	versioned, err := cache.NewSnapshot(resources, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", s.Scope, err)
	}
	return &Encoded{Scope: Scope(s.Scope), Resources: versioned.Resources(), Version: versioned.Version(), Snapshot: versioned}, nil
}

// Cluster converts a cluster.
func Cluster(c *snapshot.Cluster) *discoveryv1.Cluster {
	out := &discoveryv1.Cluster{Name: c.Name, UpstreamProtocol: upstreamProtocol(c.Protocol), Tls: backendTLS(c.TLS)}
	if out.Tls != nil && c.ClientCertificate != nil {
		// This is where the client private key leaves its redacting type.
		out.Tls.ClientCertificateChainPem = []byte(c.ClientCertificate.CertificateChain)
		out.Tls.ClientPrivateKeyPem = []byte(c.ClientCertificate.PrivateKey)
	}
	for _, ep := range c.Endpoints {
		out.Endpoints = append(out.Endpoints, &discoveryv1.Endpoint{Address: ep.Address, Port: uint32(ep.Port)}) //nolint:gosec // ports are 1-65535
	}
	return out
}

func upstreamProtocol(p snapshot.UpstreamProtocol) discoveryv1.UpstreamProtocol {
	switch p {
	case snapshot.UpstreamH2C:
		return discoveryv1.UpstreamProtocol_UPSTREAM_PROTOCOL_H2C
	case snapshot.UpstreamH2:
		return discoveryv1.UpstreamProtocol_UPSTREAM_PROTOCOL_H2
	}
	return discoveryv1.UpstreamProtocol_UPSTREAM_PROTOCOL_HTTP1
}

// backendTLS converts a cluster's TLS settings; nil stays nil (plaintext).
func backendTLS(t *graph.BackendTLS) *discoveryv1.BackendTLS {
	if t == nil {
		return nil
	}
	out := &discoveryv1.BackendTLS{
		ServerName:        t.Hostname,
		CaCertificatesPem: []byte(t.CACertificates),
		SystemRoots:       t.SystemRoots,
		FailClosed:        t.FailClosed,
	}
	for _, san := range t.SubjectAltNames {
		if san.URI != "" {
			out.SubjectAltNames = append(out.SubjectAltNames, &discoveryv1.SubjectAltName{Name: &discoveryv1.SubjectAltName_Uri{Uri: san.URI}})
			continue
		}
		out.SubjectAltNames = append(out.SubjectAltNames, &discoveryv1.SubjectAltName{Name: &discoveryv1.SubjectAltName_Hostname{Hostname: san.Hostname}})
	}
	return out
}

// Certificate converts a TLS secret; this is where the private key leaves its redacting type.
func Certificate(s *snapshot.Secret) *discoveryv1.Certificate {
	return &discoveryv1.Certificate{
		Name:                s.Name,
		CertificateChainPem: []byte(s.CertificateChain),
		PrivateKeyPem:       []byte(s.PrivateKey),
	}
}
