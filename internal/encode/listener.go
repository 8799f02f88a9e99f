package encode

import (
	"slices"
	"strings"

	"google.golang.org/protobuf/types/known/durationpb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/routeset"
	"coxswain.dev/coxswain/internal/snapshot"
)

// Listener converts a listener with its virtual hosts and routes: the listener a proxy assembles
// from the resources Snapshot makes of it.
func Listener(l *snapshot.Listener) *discoveryv1.Listener { return encodeListener(l, route) }

// listenerHead converts a listener with its virtual hosts but no routes: its Listener resource.
func listenerHead(l *snapshot.Listener) *discoveryv1.Listener { return encodeListener(l, nil) }

// routeGroup is the routes of one virtual host with one hostname, in precedence order: a
// RouteSet.
type routeGroup struct {
	groupID
	key    string
	routes []*snapshot.Route
}

// groupID names a route group within its listener.
type groupID struct{ virtualHost, hostname string }

// routeGroups returns the route sets of a listener in key order: the routes of each virtual
// host grouped by hostname, each group in the virtual host's order.
func routeGroups(l *snapshot.Listener) []*routeGroup {
	var out []*routeGroup
	for _, vh := range l.VirtualHosts {
		for _, h := range vh.Hosts() {
			out = append(out, &routeGroup{groupID: groupID{vh.Name, h.Hostname}, key: routeset.Key(l.Name, vh.Name, h.Hostname), routes: h.Routes})
		}
	}
	slices.SortFunc(out, func(a, b *routeGroup) int { return strings.Compare(a.key, b.key) })
	return out
}

// routeSet converts a route group, each route with encodeRoute.
func routeSet(l *snapshot.Listener, g *routeGroup, encodeRoute func(*snapshot.Route) *discoveryv1.Route) *discoveryv1.RouteSet {
	out := &discoveryv1.RouteSet{Listener: l.Name, VirtualHost: g.virtualHost, Hostname: g.hostname, Routes: make([]*discoveryv1.Route, 0, len(g.routes))}
	for _, r := range g.routes {
		out.Routes = append(out.Routes, encodeRoute(r))
	}
	return out
}

// encodeListener converts a listener, each route with encodeRoute, or without routes when
// encodeRoute is nil.
func encodeListener(l *snapshot.Listener, encodeRoute func(*snapshot.Route) *discoveryv1.Route) *discoveryv1.Listener {
	ns, name, _ := strings.Cut(l.Gateway, "/")
	out := &discoveryv1.Listener{
		Name:     l.Name,
		Gateway:  &discoveryv1.GatewayRef{Namespace: ns, Name: name},
		Port:     uint32(l.Port), //nolint:gosec // ports are 1-65535
		Protocol: protocol(l.Protocol),
	}
	for _, vh := range l.VirtualHosts {
		out.VirtualHosts = append(out.VirtualHosts, virtualHost(vh, encodeRoute))
	}
	if v := l.ClientValidation; v != nil {
		out.ClientValidation = &discoveryv1.ClientValidation{
			CaCertificatesPem: []byte(v.CACertificates),
			InsecureFallback:  v.InsecureFallback,
		}
	}
	return out
}

func protocol(p string) discoveryv1.Protocol {
	switch p {
	case "HTTP":
		return discoveryv1.Protocol_PROTOCOL_HTTP
	case "HTTPS":
		return discoveryv1.Protocol_PROTOCOL_HTTPS
	case snapshot.ProtocolTLSPassthrough:
		return discoveryv1.Protocol_PROTOCOL_TLS_PASSTHROUGH
	case snapshot.ProtocolTLS:
		return discoveryv1.Protocol_PROTOCOL_TLS
	case "TCP":
		return discoveryv1.Protocol_PROTOCOL_TCP
	case "UDP":
		return discoveryv1.Protocol_PROTOCOL_UDP
	}
	return discoveryv1.Protocol_PROTOCOL_UNSPECIFIED
}

func virtualHost(vh *snapshot.VirtualHost, encodeRoute func(*snapshot.Route) *discoveryv1.Route) *discoveryv1.VirtualHost {
	out := &discoveryv1.VirtualHost{Name: vh.Name, Hostname: vh.Hostname, Certificates: vh.Certificates}
	if encodeRoute == nil {
		return out
	}
	out.Routes = make([]*discoveryv1.Route, 0, len(vh.Routes))
	for _, r := range vh.Routes {
		out.Routes = append(out.Routes, encodeRoute(r))
	}
	return out
}

func route(r *snapshot.Route) *discoveryv1.Route {
	// A route, its match and its path in one allocation: they are made, kept and dropped together.
	w := &wireRoute{}
	out := &w.route
	out.Name = r.Name
	out.Hostname = r.Hostname
	out.Match = match(&w.match, &w.path, r.Match)
	out.DirectStatus = uint32(r.DirectStatus) //nolint:gosec // an HTTP status
	out.Timeouts = timeouts(r.Timeouts)
	out.Retry = retry(r.Retry)
	for _, f := range r.Filters {
		out.Filters = append(out.Filters, filter(f))
	}
	if len(r.Backends) > 0 {
		// Most rules have one backend: it goes in the route's allocation too.
		backends, ptrs := w.backend[:], w.backends[:]
		if len(r.Backends) > 1 {
			backends = make([]discoveryv1.WeightedBackend, len(r.Backends))
			ptrs = make([]*discoveryv1.WeightedBackend, len(r.Backends))
		}
		out.Backends = ptrs
		for i, b := range r.Backends {
			wb := &backends[i]
			wb.Cluster, wb.Weight, wb.ErrorStatus = b.Cluster, uint32(b.Weight), uint32(b.ErrorStatus) //nolint:gosec // weights are 0-1000000
			for _, f := range b.Filters {
				wb.Filters = append(wb.Filters, filter(f))
			}
			out.Backends[i] = wb
		}
	}
	return out
}

// wireRoute holds a route's message with the match and path messages it points to, and its
// backend when it has one.
type wireRoute struct {
	route    discoveryv1.Route
	match    discoveryv1.RouteMatch
	path     discoveryv1.PathMatch
	backend  [1]discoveryv1.WeightedBackend
	backends [1]*discoveryv1.WeightedBackend
}

// match fills out and path, which out points to, from m, and returns out.
func match(out *discoveryv1.RouteMatch, path *discoveryv1.PathMatch, m snapshot.Match) *discoveryv1.RouteMatch {
	path.Type, path.Value = matchType(m.Path.Type), m.Path.Value
	out.Path = path
	out.Method = m.Method
	out.Headers = valueMatches(m.Headers)
	out.QueryParams = valueMatches(m.QueryParams)
	return out
}

func valueMatches(in []snapshot.ValueMatch) []*discoveryv1.ValueMatch {
	if len(in) == 0 {
		return nil
	}
	msgs := make([]discoveryv1.ValueMatch, len(in))
	out := make([]*discoveryv1.ValueMatch, len(in))
	for i, v := range in {
		m := &msgs[i]
		m.Type, m.Name, m.Value = matchType(v.Type), v.Name, v.Value
		out[i] = m
	}
	return out
}

func matchType(t string) discoveryv1.MatchType {
	switch t {
	case snapshot.MatchExact:
		return discoveryv1.MatchType_MATCH_TYPE_EXACT
	case snapshot.MatchPathPrefix:
		return discoveryv1.MatchType_MATCH_TYPE_PATH_PREFIX
	case snapshot.MatchRegularExpression:
		return discoveryv1.MatchType_MATCH_TYPE_REGULAR_EXPRESSION
	}
	return discoveryv1.MatchType_MATCH_TYPE_UNSPECIFIED
}

func retry(r *snapshot.Retry) *discoveryv1.Retry {
	if r == nil {
		return nil
	}
	out := &discoveryv1.Retry{Attempts: uint32(r.Attempts)} //nolint:gosec // at least 1
	for _, c := range r.Codes {
		out.Codes = append(out.Codes, uint32(c)) //nolint:gosec // 400-599
	}
	if r.Backoff != nil {
		out.Backoff = durationpb.New(r.Backoff.Duration)
	}
	return out
}

func timeouts(t *snapshot.Timeouts) *discoveryv1.Timeouts {
	if t == nil {
		return nil
	}
	out := &discoveryv1.Timeouts{}
	if t.Request != nil {
		out.Request = durationpb.New(t.Request.Duration)
	}
	if t.BackendRequest != nil {
		out.BackendRequest = durationpb.New(t.BackendRequest.Duration)
	}
	return out
}
