package routeset

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
)

// KeyPrefix starts the key of every RouteSet resource; ListenerKeyPrefix every Listener's.
const (
	KeyPrefix         = discoveryv1.RouteSetKeyPrefix
	ListenerKeyPrefix = discoveryv1.ListenerKeyPrefix
)

// ErrInvalid reports a RouteSet or Listener encoding that cannot be assembled.
var ErrInvalid = errors.New("invalid route set")

// Separator separates the listener, virtual host and hostname in a RouteSet's key. Listener and
// virtual host names are made of Kubernetes names and slashes, hostnames of DNS labels and "*":
// none holds it.
const Separator = "|"

// Key returns the resource key of the RouteSet of a listener's virtual host and hostname:
// "routes/<listener>|<virtual host>|<hostname>".
func Key(listener, virtualHost, hostname string) string {
	return KeyPrefix + listener + Separator + virtualHost + Separator + hostname
}

// ParseKey returns the listener, virtual host and hostname a RouteSet key names.
func ParseKey(key string) (listener, virtualHost, hostname string, ok bool) {
	rest, ok := strings.CutPrefix(key, KeyPrefix)
	if !ok {
		return "", "", "", false
	}
	listener, rest, ok1 := strings.Cut(rest, Separator)
	virtualHost, hostname, ok2 := strings.Cut(rest, Separator)
	if !ok1 || !ok2 || listener == "" || virtualHost == "" || strings.Contains(hostname, Separator) {
		return "", "", "", false
	}
	return listener, virtualHost, hostname, true
}

// Compare orders the hostnames of a virtual host's sets, most specific first: the longest
// hostname that is not a wildcard (every exact one before every wildcard and the empty one),
// then the longest, then in byte order. This is the Gateway API's hostname precedence: of two
// sets that both match a request, the one first in this order holds the routes that win.
func Compare(a, b string) int {
	return cmp.Or(
		cmp.Compare(exactLen(b), exactLen(a)),
		cmp.Compare(len(b), len(a)),
		strings.Compare(a, b),
	)
}

func exactLen(h string) int {
	if strings.HasPrefix(h, "*.") {
		return 0
	}
	return len(h)
}

// Split returns l without the routes of its virtual hosts, and those routes as RouteSets, one
// per virtual host and route hostname, in key order. The routes of a set keep their order in l;
// l is not modified.
func Split(l *discoveryv1.Listener) (*discoveryv1.Listener, []*discoveryv1.RouteSet) {
	head := &discoveryv1.Listener{
		Name: l.GetName(), Gateway: l.GetGateway(), Port: l.GetPort(), Protocol: l.GetProtocol(),
		ClientValidation: l.GetClientValidation(),
	}
	var sets []*discoveryv1.RouteSet
	for _, vh := range l.GetVirtualHosts() {
		head.VirtualHosts = append(head.VirtualHosts, &discoveryv1.VirtualHost{
			Name: vh.GetName(), Hostname: vh.GetHostname(), Certificates: vh.GetCertificates(),
		})
		byHost := map[string]*discoveryv1.RouteSet{}
		for _, r := range vh.GetRoutes() {
			s := byHost[r.GetHostname()]
			if s == nil {
				s = &discoveryv1.RouteSet{Listener: l.GetName(), VirtualHost: vh.GetName(), Hostname: r.GetHostname()}
				byHost[r.GetHostname()] = s
				sets = append(sets, s)
			}
			s.Routes = append(s.Routes, r)
		}
	}
	slices.SortFunc(sets, func(a, b *discoveryv1.RouteSet) int {
		return strings.Compare(Key(a.GetListener(), a.GetVirtualHost(), a.GetHostname()), Key(b.GetListener(), b.GetVirtualHost(), b.GetHostname()))
	})
	return head, sets
}

// Set is one RouteSet resource of a listener: what its key names, and its payload's encoding.
type Set struct {
	VirtualHost string
	Hostname    string
	Payload     []byte
}

// Field numbers, from the descriptors.
var (
	listenerName         = fieldNumber(&discoveryv1.Listener{}, "name")
	listenerVirtualHosts = fieldNumber(&discoveryv1.Listener{}, "virtual_hosts")
	virtualHostName      = fieldNumber(&discoveryv1.VirtualHost{}, "name")
	virtualHostRoutes    = fieldNumber(&discoveryv1.VirtualHost{}, "routes")
	setListener          = fieldNumber(&discoveryv1.RouteSet{}, "listener")
	setVirtualHost       = fieldNumber(&discoveryv1.RouteSet{}, "virtual_host")
	setHostname          = fieldNumber(&discoveryv1.RouteSet{}, "hostname")
	setRoutes            = fieldNumber(&discoveryv1.RouteSet{}, "routes")
)

func init() {
	if setRoutes != virtualHostRoutes {
		panic("routeset: RouteSet.routes and VirtualHost.routes must share their field number")
	}
	if setVirtualHost != setListener+1 || setHostname != setListener+2 {
		panic("routeset: RouteSet's listener, virtual_host and hostname must be numbered in a row")
	}
}

func fieldNumber(m proto.Message, name protoreflect.Name) protowire.Number {
	fd := m.ProtoReflect().Descriptor().Fields().ByName(name)
	if fd == nil {
		panic(fmt.Sprintf("routeset: %s has no field %s", m.ProtoReflect().Descriptor().FullName(), name))
	}
	return fd.Number()
}

// Assemble returns the encoding of the Listener named name whose encoding is listener, with the
// routes of sets in its virtual hosts: each virtual host's sets in Compare order of their
// hostnames, the routes of each set in its order, copied as they are encoded. The result decodes
// as the Listener the controller split. It fails when a set's payload is malformed, holds a field
// RouteSet does not declare or disagrees with its key, when two sets name one virtual host and
// hostname, when a set names a virtual host the listener lacks or has twice, or when a virtual
// host with sets has routes of its own.
func Assemble(name string, listener []byte, sets []Set) ([]byte, error) {
	order := make([]int32, len(sets))
	for i := range order {
		order[i] = int32(i) //nolint:gosec // a listener has far fewer than 2^31 sets
	}
	slices.SortFunc(order, func(i, j int32) int {
		a, b := &sets[i], &sets[j]
		return cmp.Or(strings.Compare(a.VirtualHost, b.VirtualHost), Compare(a.Hostname, b.Hostname))
	})
	// Each virtual host's routes: the encoded routes fields of its sets, in order, located in
	// the sets' payloads and copied once, into the result. The sets are sorted by virtual host,
	// so each virtual host's fields are one run of fields, which holds every set's: what this
	// allocates grows with the sets, whatever the number of virtual hosts.
	fields := make([][]byte, 0, len(sets))
	routes := make(map[string]*vhostRoutes, 1)
	var last *vhostRoutes
	size := len(listener)
	for k, i := range order {
		s := &sets[i]
		prev := &sets[order[max(k-1, 0)]]
		if k > 0 && prev.VirtualHost == s.VirtualHost && prev.Hostname == s.Hostname {
			return nil, fmt.Errorf("%w: two sets of virtual host %q and hostname %q", ErrInvalid, s.VirtualHost, s.Hostname)
		}
		if last == nil || prev.VirtualHost != s.VirtualHost {
			last = &vhostRoutes{from: len(fields), to: len(fields)}
			routes[s.VirtualHost] = last
			size += 2 * binary.MaxVarintLen64
		}
		var err error
		if fields, err = appendSetRoutes(fields, name, s); err != nil {
			return nil, err
		}
		for _, f := range fields[last.to:] {
			last.size += len(f)
			size += len(f)
		}
		last.to = len(fields)
	}
	out := make([]byte, 0, size)
	done := make(map[string]bool, len(routes))
	gotName := false
	for b := listener; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, fmt.Errorf("%w: listener %s: %w", ErrInvalid, name, protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return nil, fmt.Errorf("%w: listener %s: %w", ErrInvalid, name, protowire.ParseError(m))
		}
		field, value := b[:n+m], b[n:n+m]
		b = b[n+m:]
		if typ != protowire.BytesType || (num != listenerVirtualHosts && num != listenerName) {
			out = append(out, field...)
			continue
		}
		v, _ := protowire.ConsumeBytes(value)
		if num == listenerName {
			if string(v) != name {
				return nil, fmt.Errorf("%w: listener %q under the name %q", ErrInvalid, v, name)
			}
			gotName = true
			out = append(out, field...)
			continue
		}
		vhName, own, err := scanVirtualHost(v)
		if err != nil {
			return nil, fmt.Errorf("%w: listener %s: %w", ErrInvalid, name, err)
		}
		if done[vhName] {
			return nil, fmt.Errorf("%w: listener %s has two virtual hosts named %q", ErrInvalid, name, vhName)
		}
		extra, ok := routes[vhName]
		if !ok {
			out = append(out, field...)
			continue
		}
		done[vhName] = true
		if own {
			return nil, fmt.Errorf("%w: listener %s: virtual host %q has routes of its own and in route sets", ErrInvalid, name, vhName)
		}
		delete(routes, vhName)
		out = protowire.AppendTag(out, num, protowire.BytesType)
		out = protowire.AppendVarint(out, uint64(len(v)+extra.size))
		out = append(out, v...)
		for _, f := range fields[extra.from:extra.to] {
			out = append(out, f...)
		}
	}
	if !gotName {
		return nil, fmt.Errorf("%w: listener %s has no name", ErrInvalid, name)
	}
	for vh := range routes {
		return nil, fmt.Errorf("%w: listener %s has no virtual host %q for its route sets", ErrInvalid, name, vh)
	}
	return out, nil
}

// vhostRoutes are the encoded routes fields of one virtual host's sets, fields[from:to] of
// Assemble's fields, and their total size.
type vhostRoutes struct {
	from, to int
	size     int
}

// scanVirtualHost returns a virtual host encoding's name and whether it holds routes.
func scanVirtualHost(b []byte) (name string, routes bool, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", false, protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return "", false, protowire.ParseError(m)
		}
		switch {
		case num == virtualHostName && typ == protowire.BytesType:
			v, _ := protowire.ConsumeBytes(b[n : n+m])
			name = string(v)
		case num == virtualHostRoutes:
			routes = true
		}
		b = b[n+m:]
	}
	return name, routes, nil
}

// appendSetRoutes appends the encoded routes fields of a set (slices of its payload, one for each
// run of them) to fields, after checking that its payload holds only RouteSet's fields and names
// what its key names.
func appendSetRoutes(fields [][]byte, listener string, s *Set) ([][]byte, error) {
	var got [3][]byte
	run := -1 // where the current run of routes fields starts in s.Payload
	for off := 0; off < len(s.Payload); {
		b := s.Payload[off:]
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, Key(listener, s.VirtualHost, s.Hostname), protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, Key(listener, s.VirtualHost, s.Hostname), protowire.ParseError(m))
		}
		if typ != protowire.BytesType {
			return nil, fmt.Errorf("%w: %s: field %d of wire type %d", ErrInvalid, Key(listener, s.VirtualHost, s.Hostname), num, typ)
		}
		if num != setRoutes && run >= 0 {
			fields, run = append(fields, s.Payload[run:off]), -1
		}
		switch num {
		case setListener, setVirtualHost, setHostname:
			v, _ := protowire.ConsumeBytes(b[n : n+m])
			got[num-setListener] = v
		case setRoutes:
			if run < 0 {
				run = off
			}
		default:
			return nil, fmt.Errorf("%w: %s: unknown field %d", ErrInvalid, Key(listener, s.VirtualHost, s.Hostname), num)
		}
		off += n + m
	}
	if run >= 0 {
		fields = append(fields, s.Payload[run:])
	}
	if string(got[0]) != listener || string(got[1]) != s.VirtualHost || string(got[2]) != s.Hostname {
		return nil, fmt.Errorf("%w: key %s holds the set of %q", ErrInvalid, Key(listener, s.VirtualHost, s.Hostname), got)
	}
	return fields, nil
}

// Inline returns resources, sorted by key, in the layout of a proxy that predates RouteSets: every
// RouteSet's routes assembled into its Listener, and no RouteSet. resources itself is returned
// when it holds no RouteSet. The payloads of the other resources are shared.
func Inline(resources []*discoveryv1.Resource) ([]*discoveryv1.Resource, error) {
	sets := map[string][]Set{}
	for _, r := range resources {
		if !strings.HasPrefix(r.GetKey(), KeyPrefix) {
			continue
		}
		l, vh, host, ok := ParseKey(r.GetKey())
		if !ok {
			return nil, fmt.Errorf("%w: key %q", ErrInvalid, r.GetKey())
		}
		if url := r.GetPayload().GetTypeUrl(); url != setTypeURL {
			return nil, fmt.Errorf("%w: %s holds a %s", ErrInvalid, r.GetKey(), url)
		}
		sets[l] = append(sets[l], Set{VirtualHost: vh, Hostname: host, Payload: r.GetPayload().GetValue()})
	}
	if len(sets) == 0 {
		return resources, nil
	}
	out := make([]*discoveryv1.Resource, 0, len(resources))
	for _, r := range resources {
		key := r.GetKey()
		if strings.HasPrefix(key, KeyPrefix) {
			continue
		}
		name, ok := strings.CutPrefix(key, ListenerKeyPrefix)
		if !ok || sets[name] == nil {
			out = append(out, r)
			continue
		}
		b, err := Assemble(name, r.GetPayload().GetValue(), sets[name])
		if err != nil {
			return nil, err
		}
		delete(sets, name)
		out = append(out, &discoveryv1.Resource{Key: key, Payload: &anypb.Any{TypeUrl: r.GetPayload().GetTypeUrl(), Value: b}})
	}
	for l := range sets {
		return nil, fmt.Errorf("%w: route sets of listener %s, which the snapshot lacks", ErrInvalid, l)
	}
	return out, nil
}

// TypeURL is the type URL of a RouteSet payload.
var setTypeURL = "type.googleapis.com/" + string(proto.MessageName(&discoveryv1.RouteSet{}))

// TypeURL returns the type URL of a RouteSet payload.
func TypeURL() string { return setTypeURL }
