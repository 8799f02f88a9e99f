package routeset_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/routeset"
)

var hostnames = []string{"", "a.example.com", "b.example.com", "*.example.com", "*.a.example.com", "x.a.example.com", "*.com", "long-name.example.com"}

// randomListener returns a listener of up to three virtual hosts with up to twelve routes each.
func randomListener(rnd *rand.Rand) *discoveryv1.Listener {
	l := &discoveryv1.Listener{
		Name: "default/gw/80", Gateway: &discoveryv1.GatewayRef{Namespace: "default", Name: "gw"}, Port: 80,
		Protocol: discoveryv1.Protocol_PROTOCOL_HTTP,
	}
	if rnd.IntN(3) == 0 {
		l.ClientValidation = &discoveryv1.ClientValidation{CaCertificatesPem: []byte("roots")}
	}
	for v := range 1 + rnd.IntN(3) {
		vh := &discoveryv1.VirtualHost{Name: fmt.Sprintf("vh%d", v), Hostname: hostnames[rnd.IntN(len(hostnames))]}
		if rnd.IntN(2) == 0 {
			vh.Certificates = []string{"default/cert"}
		}
		for r := range rnd.IntN(13) {
			vh.Routes = append(vh.Routes, &discoveryv1.Route{
				Name:     fmt.Sprintf("default/r%d/%d/0", v, r),
				Hostname: hostnames[rnd.IntN(len(hostnames))],
				Match:    &discoveryv1.RouteMatch{Path: &discoveryv1.PathMatch{Type: discoveryv1.MatchType_MATCH_TYPE_PATH_PREFIX, Value: fmt.Sprintf("/%d", rnd.IntN(4))}},
				Backends: []*discoveryv1.WeightedBackend{{Cluster: "default/svc:80", Weight: 1}},
			})
		}
		l.VirtualHosts = append(l.VirtualHosts, vh)
	}
	return l
}

// grouped returns l with each virtual host's routes in the order of their sets: stably sorted
// by routeset.Compare of their hostnames.
func grouped(l *discoveryv1.Listener) *discoveryv1.Listener {
	out := proto.Clone(l).(*discoveryv1.Listener)
	for _, vh := range out.GetVirtualHosts() {
		slices.SortStableFunc(vh.Routes, func(a, b *discoveryv1.Route) int { return routeset.Compare(a.GetHostname(), b.GetHostname()) })
	}
	return out
}

func marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func setsOf(t testing.TB, sets []*discoveryv1.RouteSet) []routeset.Set {
	t.Helper()
	out := make([]routeset.Set, 0, len(sets))
	for _, s := range sets {
		out = append(out, routeset.Set{VirtualHost: s.GetVirtualHost(), Hostname: s.GetHostname(), Payload: marshal(t, s)})
	}
	return out
}

// Tests that assembling the sets Split makes gives back the listener, each virtual host's routes
// in the order of their hostnames' sets, for random listeners and whatever order the sets come
// in; and that the order of sets keeps the Gateway API's hostname precedence.
func TestAssembleGivesBackTheSplitListener(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		l := randomListener(rnd)
		head, sets := Split(t, l)
		in := setsOf(t, sets)
		rnd.Shuffle(len(in), func(i, j int) { in[i], in[j] = in[j], in[i] })
		b, err := routeset.Assemble(l.GetName(), marshal(t, head), in)
		if err != nil {
			t.Fatalf("listener %d: %v", i, err)
		}
		var got discoveryv1.Listener
		if err := proto.Unmarshal(b, &got); err != nil {
			t.Fatalf("listener %d: assembled encoding does not decode: %v", i, err)
		}
		if want := grouped(l); !proto.Equal(&got, want) {
			t.Fatalf("listener %d: assembled\n%v\nwant\n%v", i, &got, want)
		}
	}
}

func Split(t testing.TB, l *discoveryv1.Listener) (*discoveryv1.Listener, []*discoveryv1.RouteSet) {
	t.Helper()
	before := proto.Clone(l)
	head, sets := routeset.Split(l)
	if !proto.Equal(before, l) {
		t.Fatal("Split modified its listener")
	}
	for _, vh := range head.GetVirtualHosts() {
		if len(vh.GetRoutes()) > 0 {
			t.Fatalf("Split left routes in virtual host %s", vh.GetName())
		}
	}
	keys := make([]string, 0, len(sets))
	for _, s := range sets {
		keys = append(keys, routeset.Key(s.GetListener(), s.GetVirtualHost(), s.GetHostname()))
		for _, r := range s.GetRoutes() {
			if r.GetHostname() != s.GetHostname() {
				t.Fatalf("set %s holds a route of hostname %q", keys[len(keys)-1], r.GetHostname())
			}
		}
	}
	if !slices.IsSorted(keys) || len(slices.Compact(slices.Clone(keys))) != len(keys) {
		t.Fatalf("set keys not sorted and unique: %q", keys)
	}
	return head, sets
}

// Tests the order of hostnames: exact before wildcard before none, longer first, and that of
// two hostnames of one length at most one matches any request host unless they are equal.
func TestCompareOrdersByHostnamePrecedence(t *testing.T) {
	t.Parallel()
	got := slices.Clone(hostnames)
	slices.SortFunc(got, routeset.Compare)
	want := []string{"long-name.example.com", "x.a.example.com", "a.example.com", "b.example.com", "*.a.example.com", "*.example.com", "*.com", ""}
	if !slices.Equal(got, want) {
		t.Errorf("order %q, want %q", got, want)
	}
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key                string
		listener, vh, host string
		ok                 bool
	}{
		{key: routeset.Key("ns/gw/80", "http", "a.example.com"), listener: "ns/gw/80", vh: "http", host: "a.example.com", ok: true},
		{key: routeset.Key("ns/gw/80", "http", ""), listener: "ns/gw/80", vh: "http", ok: true},
		{key: routeset.Key("ns/gw/443", "https", "*.example.com"), listener: "ns/gw/443", vh: "https", host: "*.example.com", ok: true},
		{key: routeset.Key("ns/gw/80", "ns/set/http", "a.example.com"), listener: "ns/gw/80", vh: "ns/set/http", host: "a.example.com", ok: true},
		{key: "routes/ns/gw/80/http/a.example.com"},
		{key: "routes/|http|a"},
		{key: "routes/ns/gw/80||a"},
		{key: "routes/ns/gw/80|http|a|b"},
		{key: "listener/ns/gw/80"},
		{key: "routes/"},
	} {
		l, vh, host, ok := routeset.ParseKey(tc.key)
		if ok != tc.ok || l != tc.listener || vh != tc.vh || host != tc.host {
			t.Errorf("ParseKey(%q) = %q %q %q %t, want %q %q %q %t", tc.key, l, vh, host, ok, tc.listener, tc.vh, tc.host, tc.ok)
		}
	}
}

// Tests every refusal of Assemble.
func TestAssembleRefusesWhatItCannotAssemble(t *testing.T) {
	t.Parallel()
	route := &discoveryv1.Route{Name: "r", Hostname: "a.example.com"}
	head := &discoveryv1.Listener{Name: "ns/gw/80", VirtualHosts: []*discoveryv1.VirtualHost{{Name: "http"}}}
	set := &discoveryv1.RouteSet{Listener: "ns/gw/80", VirtualHost: "http", Hostname: "a.example.com", Routes: []*discoveryv1.Route{route}}
	good := routeset.Set{VirtualHost: "http", Hostname: "a.example.com", Payload: marshal(t, set)}
	unknown := append(marshal(t, set), 0x2a, 0x01, 'x') // field 5, bytes
	varint := append(marshal(t, set), 0x08, 0x01)       // field 1 as a varint
	own := proto.Clone(head).(*discoveryv1.Listener)
	own.VirtualHosts[0].Routes = []*discoveryv1.Route{route}
	for _, tc := range []struct {
		name     string
		listener []byte
		sets     []routeset.Set
		want     string
	}{
		{"malformed set", marshal(t, head), []routeset.Set{{VirtualHost: "http", Hostname: "a.example.com", Payload: []byte{0x22, 0x05, 1}}}, "unexpected EOF"},
		{"unknown field", marshal(t, head), []routeset.Set{{VirtualHost: "http", Hostname: "a.example.com", Payload: unknown}}, "unknown field 5"},
		{"field of another wire type", marshal(t, head), []routeset.Set{{VirtualHost: "http", Hostname: "a.example.com", Payload: varint}}, "wire type"},
		{"payload of another key", marshal(t, head), []routeset.Set{{VirtualHost: "http", Hostname: "b.example.com", Payload: good.Payload}}, "holds the set of"},
		{"two sets of one key", marshal(t, head), []routeset.Set{good, good}, "two sets"},
		{"virtual host missing", marshal(t, head), []routeset.Set{{VirtualHost: "https", Hostname: "a.example.com", Payload: marshal(t, &discoveryv1.RouteSet{Listener: "ns/gw/80", VirtualHost: "https", Hostname: "a.example.com"})}}, `no virtual host "https"`},
		{"routes of its own", marshal(t, own), []routeset.Set{good}, "routes of its own"},
		{"listener of another name", marshal(t, &discoveryv1.Listener{Name: "ns/gw/81", VirtualHosts: head.VirtualHosts}), []routeset.Set{good}, "under the name"},
		{"listener without a name", marshal(t, &discoveryv1.Listener{VirtualHosts: head.VirtualHosts}), []routeset.Set{good}, "has no name"},
		{"malformed listener", []byte{0x2a, 0x10}, []routeset.Set{good}, "unexpected EOF"},
	} {
		_, err := routeset.Assemble("ns/gw/80", tc.listener, tc.sets)
		if !errors.Is(err, routeset.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want ErrInvalid with %q", tc.name, err, tc.want)
		}
	}
	if _, err := routeset.Assemble("ns/gw/80", marshal(t, head), []routeset.Set{good}); err != nil {
		t.Errorf("the good set: %v", err)
	}
}

func resource(t testing.TB, key string, m proto.Message) *discoveryv1.Resource {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	a.Value = marshal(t, m)
	return &discoveryv1.Resource{Key: key, Payload: a}
}

// Tests that Inline puts every set back into its listener, keeps the other resources as they are
// and in key order, returns a set without RouteSets itself, and refuses sets without their
// listener.
func TestInline(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(3, 4))
	l := randomListener(rnd)
	for len(l.GetVirtualHosts()[0].GetRoutes()) == 0 {
		l = randomListener(rnd)
	}
	head, sets := routeset.Split(l)
	cluster := resource(t, "cluster/default/svc:80", &discoveryv1.Cluster{Name: "default/svc:80"})
	in := []*discoveryv1.Resource{cluster, resource(t, routeset.ListenerKeyPrefix+l.GetName(), head)}
	for _, s := range sets {
		in = append(in, resource(t, routeset.Key(s.GetListener(), s.GetVirtualHost(), s.GetHostname()), s))
	}
	slices.SortFunc(in, func(a, b *discoveryv1.Resource) int { return strings.Compare(a.GetKey(), b.GetKey()) })
	out, err := routeset.Inline(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || out[0] != cluster || out[1].GetKey() != routeset.ListenerKeyPrefix+l.GetName() {
		t.Fatalf("inlined resources %v", out)
	}
	var got discoveryv1.Listener
	if err := out[1].GetPayload().UnmarshalTo(&got); err != nil {
		t.Fatal(err)
	}
	if want := grouped(l); !proto.Equal(&got, want) {
		t.Errorf("inlined listener\n%v\nwant\n%v", &got, want)
	}
	plain := []*discoveryv1.Resource{cluster, resource(t, routeset.ListenerKeyPrefix+l.GetName(), l)}
	if same, err := routeset.Inline(plain); err != nil || &same[0] != &plain[0] {
		t.Errorf("a set without RouteSets was not returned as it is: %v", err)
	}
	orphan := []*discoveryv1.Resource{cluster, in[len(in)-1]}
	if _, err := routeset.Inline(orphan); !errors.Is(err, routeset.ErrInvalid) {
		t.Errorf("sets without their listener: error %v, want ErrInvalid", err)
	}
}

// FuzzAssemble checks Assemble against the protobuf decoder on the same bytes: whatever the
// listener and set encodings, Assemble never panics, and an encoding it assembles decodes only
// when the listener and every set decode, to the listener with the sets' routes appended to
// their virtual hosts in order. Assemble is stricter than the decoder in what it refuses
// (fields RouteSet does not declare, a set's fields that disagree with its key, sets of a virtual
// host that has routes of its own or is missing): those are not RouteSets the controller makes.
func FuzzAssemble(f *testing.F) {
	rnd := rand.New(rand.NewPCG(5, 6))
	for range 8 {
		l := randomListener(rnd)
		head, sets := routeset.Split(l)
		for _, s := range sets {
			f.Add(marshal(f, head), s.GetVirtualHost(), s.GetHostname(), marshal(f, s))
		}
	}
	f.Fuzz(func(t *testing.T, listener []byte, vh, host string, payload []byte) {
		b, err := routeset.Assemble("default/gw/80", listener, []routeset.Set{{VirtualHost: vh, Hostname: host, Payload: payload}})
		if err != nil {
			return
		}
		var got discoveryv1.Listener
		if proto.Unmarshal(b, &got) != nil {
			return
		}
		var want discoveryv1.Listener
		var set discoveryv1.RouteSet
		if err := proto.Unmarshal(listener, &want); err != nil {
			t.Fatalf("assembled an encoding that decodes from a listener that does not: %v", err)
		}
		if err := proto.Unmarshal(payload, &set); err != nil {
			t.Fatalf("assembled an encoding that decodes from a set that does not: %v", err)
		}
		if set.GetListener() != "default/gw/80" || set.GetVirtualHost() != vh || set.GetHostname() != host {
			t.Fatalf("assembled a set whose fields %q %q %q are not its key's", set.GetListener(), set.GetVirtualHost(), set.GetHostname())
		}
		n := 0
		for _, v := range want.GetVirtualHosts() {
			if v.GetName() == vh {
				v.Routes = append(v.Routes, set.GetRoutes()...)
				n++
			}
		}
		if n == 0 {
			t.Fatalf("assembled sets of virtual host %q, which the listener lacks", vh)
		}
		if !proto.Equal(&got, &want) {
			t.Fatalf("assembled\n%v\nwant\n%v", &got, &want)
		}
	})
}

// BenchmarkAssemble assembles a listener of 10,000 routes over 1,000 hostnames from its route
// sets, as a proxy does after any of them changed.
func BenchmarkAssemble(b *testing.B) {
	l := &discoveryv1.Listener{Name: "bench/gw/80", Port: 80, Protocol: discoveryv1.Protocol_PROTOCOL_HTTP}
	vh := &discoveryv1.VirtualHost{Name: "http"}
	for i := range 10000 {
		vh.Routes = append(vh.Routes, &discoveryv1.Route{
			Name: fmt.Sprintf("bench/route-%d/0/0", i), Hostname: fmt.Sprintf("svc-%d.example.com", i/10),
			Match:    &discoveryv1.RouteMatch{Path: &discoveryv1.PathMatch{Type: discoveryv1.MatchType_MATCH_TYPE_PATH_PREFIX, Value: fmt.Sprintf("/api/v%d", i%10)}},
			Backends: []*discoveryv1.WeightedBackend{{Cluster: "bench/app:80", Weight: 1}},
		})
	}
	l.VirtualHosts = []*discoveryv1.VirtualHost{vh}
	head, sets := routeset.Split(l)
	in := setsOf(b, sets)
	listener := marshal(b, head)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := routeset.Assemble(l.GetName(), listener, in); err != nil {
			b.Fatal(err)
		}
	}
}
