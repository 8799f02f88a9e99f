package snaptest

import (
	"fmt"
	"iter"
	"net"
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/resource"
)

// Key returns the resource key of a routing payload.
func Key(msg proto.Message) string {
	switch m := msg.(type) {
	case *discoveryv1.Listener:
		return discoveryv1.ListenerKeyPrefix + m.GetName()
	case *discoveryv1.Cluster:
		return discoveryv1.ClusterKeyPrefix + m.GetName()
	case *discoveryv1.Certificate:
		return discoveryv1.CertificateKeyPrefix + m.GetName()
	}
	return "unknown/" + string(proto.MessageName(msg))
}

// Resources wraps payloads into keyed resources.
func Resources(tb testing.TB, msgs ...proto.Message) []*discoveryv1.Resource {
	tb.Helper()
	out, err := NewResources(msgs...)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// NewResources wraps payloads into keyed resources.
func NewResources(msgs ...proto.Message) ([]*discoveryv1.Resource, error) {
	out := make([]*discoveryv1.Resource, 0, len(msgs))
	for _, m := range msgs {
		a, err := anypb.New(m)
		if err != nil {
			return nil, err
		}
		out = append(out, &discoveryv1.Resource{Key: Key(m), Payload: a})
	}
	return out, nil
}

// Seq yields the keys and payloads of resources, as a Set's All does.
func Seq(resources []*discoveryv1.Resource) iter.Seq2[string, *anypb.Any] {
	return func(yield func(string, *anypb.Any) bool) {
		for _, r := range resources {
			if !yield(r.GetKey(), r.GetPayload()) {
				return
			}
		}
	}
}

// Set builds a resource set at version from payloads.
func Set(tb testing.TB, version string, msgs ...proto.Message) *resource.Set {
	tb.Helper()
	s, err := resource.NewSet(version, Resources(tb, msgs...))
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// Listener returns a listener of gateway "<namespace>/<name>" on port.
func Listener(gateway string, port uint32, protocol discoveryv1.Protocol, vhosts ...*discoveryv1.VirtualHost) *discoveryv1.Listener {
	return &discoveryv1.Listener{
		Name: fmt.Sprintf("%s/%d", gateway, port), Port: port, Protocol: protocol, VirtualHosts: vhosts,
	}
}

// HTTP returns an HTTP listener.
func HTTP(gateway string, port uint32, vhosts ...*discoveryv1.VirtualHost) *discoveryv1.Listener {
	return Listener(gateway, port, discoveryv1.Protocol_PROTOCOL_HTTP, vhosts...)
}

// VHost returns a virtual host.
func VHost(name, hostname string, routes ...*discoveryv1.Route) *discoveryv1.VirtualHost {
	return &discoveryv1.VirtualHost{Name: name, Hostname: hostname, Routes: routes}
}

// Prefix returns a path prefix match.
func Prefix(v string) *discoveryv1.RouteMatch {
	return pathMatch(discoveryv1.MatchType_MATCH_TYPE_PATH_PREFIX, v)
}

// Exact returns an exact path match.
func Exact(v string) *discoveryv1.RouteMatch {
	return pathMatch(discoveryv1.MatchType_MATCH_TYPE_EXACT, v)
}

// Regex returns a regular expression path match.
func Regex(v string) *discoveryv1.RouteMatch {
	return pathMatch(discoveryv1.MatchType_MATCH_TYPE_REGULAR_EXPRESSION, v)
}

func pathMatch(t discoveryv1.MatchType, v string) *discoveryv1.RouteMatch {
	return &discoveryv1.RouteMatch{Path: &discoveryv1.PathMatch{Type: t, Value: v}}
}

// Route returns a route forwarding everything it matches to one cluster.
func Route(name, hostname string, match *discoveryv1.RouteMatch, cluster string) *discoveryv1.Route {
	return &discoveryv1.Route{
		Name: name, Hostname: hostname, Match: match,
		Backends: []*discoveryv1.WeightedBackend{{Cluster: cluster, Weight: 1}},
	}
}

// Cluster returns a cluster of "host:port" endpoints.
func Cluster(tb testing.TB, name string, addrs ...string) *discoveryv1.Cluster {
	tb.Helper()
	out, err := NewCluster(name, addrs...)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// NewCluster returns a cluster of "host:port" endpoints.
func NewCluster(name string, addrs ...string) (*discoveryv1.Cluster, error) {
	out := &discoveryv1.Cluster{Name: name}
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return nil, err
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("endpoint %s: %w", a, err)
		}
		out.Endpoints = append(out.Endpoints, &discoveryv1.Endpoint{Address: host, Port: uint32(p)})
	}
	return out, nil
}
