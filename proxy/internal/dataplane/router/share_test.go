package router

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// shareBase is two Gateways, one with 1,000 routes over four clusters on port 80 and one
// with an HTTPS virtual host on port 443.
func shareBase(t *testing.T) (msgs map[string]proto.Message, cert *discoveryv1.Certificate) {
	t.Helper()
	routes := snaptest.ScaleRoutes(1000, "")
	for i, r := range routes {
		r.Backends[0].Cluster = fmt.Sprintf("ns/app-%d:80", i%4)
	}
	cert, _ = snaptest.Certificate(t, "ns/cert", "a.example.com")
	msgs = map[string]proto.Message{}
	for _, m := range []proto.Message{
		snaptest.HTTP("ns/big", 80, snaptest.VHost("http", "", routes...)),
		snaptest.Listener("ns/tls", 443, discoveryv1.Protocol_PROTOCOL_HTTPS, &discoveryv1.VirtualHost{
			Name: "https", Certificates: []string{"ns/cert"},
			Routes: []*discoveryv1.Route{snaptest.Route("ns/tls/0/0", "", snaptest.Prefix("/"), "ns/app-0:80")},
		}),
		cert,
	} {
		msgs[snaptest.Key(m)] = m
	}
	for i := range 4 {
		cl := snaptest.Cluster(t, fmt.Sprintf("ns/app-%d:80", i), fmt.Sprintf("10.0.0.%d:80", i))
		msgs[snaptest.Key(cl)] = cl
	}
	return msgs, cert
}

// encode wraps msgs into resources, keeping the payloads of from for the keys whose message
// is the same object, as the agent's merge keeps unchanged payloads.
func encode(t *testing.T, msgs map[string]proto.Message, from map[string]*discoveryv1.Resource, was map[string]proto.Message) map[string]*discoveryv1.Resource {
	t.Helper()
	out := map[string]*discoveryv1.Resource{}
	for key, m := range msgs {
		if r, ok := from[key]; ok && was[key] == m {
			out[key] = r
			continue
		}
		a := &anypb.Any{}
		if err := anypb.MarshalFrom(a, m, proto.MarshalOptions{Deterministic: true}); err != nil {
			t.Fatal(err)
		}
		out[key] = &discoveryv1.Resource{Key: key, Payload: a}
	}
	return out
}

func list(rs map[string]*discoveryv1.Resource) []*discoveryv1.Resource {
	out := make([]*discoveryv1.Resource, 0, len(rs))
	for _, r := range rs {
		out = append(out, r)
	}
	return out
}

// derive applies change to a copy of the base set and returns both tables, checking the
// derived one against a scratch compile.
func derive(t *testing.T, change func(msgs map[string]proto.Message)) (before, after *Table) {
	t.Helper()
	msgs, _ := shareBase(t)
	res := encode(t, msgs, nil, nil)
	before, err := Compile(snaptest.Seq(list(res)))
	if err != nil {
		t.Fatal(err)
	}
	next := make(map[string]proto.Message, len(msgs))
	for k, v := range msgs {
		next[k] = v
	}
	change(next)
	nextRes := list(encode(t, next, res, msgs))
	after, err = Update(before, snaptest.Seq(nextRes))
	if err != nil {
		t.Fatal(err)
	}
	want, err := Compile(snaptest.Seq(nextRes))
	if err != nil {
		t.Fatal(err)
	}
	if diff := diffViews(viewOf(want), viewOf(after)); diff != "" {
		t.Fatalf("Update and Compile differ (-compile +update):\n%s", diff)
	}
	return before, after
}

func bigVHost(t *testing.T, table *Table) *VirtualHost {
	t.Helper()
	p, ok := table.Port(80)
	if !ok {
		t.Fatal("no port 80")
	}
	return p.vhosts[0]
}

// sharedRoutes counts the routes b shares with a, position by position.
func sharedRoutes(a, b *VirtualHost) int {
	n := 0
	for i := range min(len(a.routes), len(b.routes)) {
		if a.routes[i] == b.routes[i] {
			n++
		}
	}
	return n
}

// Tests that Update compiles only what a delta changed and shares the rest with the table it
// derives from.
func TestUpdateShares(t *testing.T) {
	t.Parallel()
	t.Run("one route changed in a large virtual host", func(t *testing.T) {
		t.Parallel()
		before, after := derive(t, func(msgs map[string]proto.Message) {
			l := proto.CloneOf(msgs["listener/ns/big/80"].(*discoveryv1.Listener))
			l.VirtualHosts[0].Routes[500].Match = snaptest.Prefix("/changed")
			msgs["listener/ns/big/80"] = l
		})
		if n := sharedRoutes(bigVHost(t, before), bigVHost(t, after)); n != 999 {
			t.Errorf("%d of 1000 routes shared, want 999", n)
		}
		if b, a := before.listeners["ns/tls/443"], after.listeners["ns/tls/443"]; a != b {
			t.Error("the untouched listener was compiled again")
		}
		p1, _ := before.Port(443)
		p2, _ := after.Port(443)
		if p1 != p2 {
			t.Error("the untouched port was built again")
		}
		for i := range before.clusters {
			if before.clusters[i] != after.clusters[i] {
				t.Errorf("cluster %d was compiled again", i)
			}
		}
	})
	t.Run("one route inserted and one removed", func(t *testing.T) {
		t.Parallel()
		before, after := derive(t, func(msgs map[string]proto.Message) {
			l := proto.CloneOf(msgs["listener/ns/big/80"].(*discoveryv1.Listener))
			rs := l.VirtualHosts[0].Routes
			rs = append(rs[:100], rs[101:]...)
			rs = append(rs[:700], append([]*discoveryv1.Route{snaptest.Route("ns/new/0/0", "", snaptest.Exact("/new"), "ns/app-1:80")}, rs[700:]...)...)
			l.VirtualHosts[0].Routes = rs
			msgs["listener/ns/big/80"] = l
		})
		old, cur := bigVHost(t, before), bigVHost(t, after)
		kept := map[*Route]bool{}
		for _, r := range old.routes {
			kept[r] = true
		}
		n := 0
		for _, r := range cur.routes {
			if kept[r] {
				n++
			}
		}
		if n != 999 {
			t.Errorf("%d routes shared, want 999: those around the change keep their place without renumbering", n)
		}
	})
	t.Run("one cluster's endpoints changed", func(t *testing.T) {
		t.Parallel()
		before, after := derive(t, func(msgs map[string]proto.Message) {
			msgs["cluster/ns/app-2:80"] = snaptest.Cluster(t, "ns/app-2:80", "10.0.1.1:80", "10.0.1.2:80")
		})
		p1, _ := before.Port(80)
		p2, _ := after.Port(80)
		if p1 != p2 {
			t.Error("a port was built again for a change of endpoints")
		}
		for i := range before.clusters {
			if changed := before.clusters[i] != after.clusters[i]; changed != (before.clusters[i].Name == "ns/app-2:80") {
				t.Errorf("cluster %s: compiled again %v", before.clusters[i].Name, changed)
			}
		}
		if cl := after.clusterNames["ns/app-2:80"]; cl.Index != before.clusterNames["ns/app-2:80"].Index || len(cl.Endpoints) != 2 {
			t.Errorf("the changed cluster: %+v", cl)
		}
	})
	t.Run("one certificate changed", func(t *testing.T) {
		t.Parallel()
		before, after := derive(t, func(msgs map[string]proto.Message) {
			cert, _ := snaptest.Certificate(t, "ns/cert", "b.example.com")
			msgs["certificate/ns/cert"] = cert
		})
		p1, _ := before.Port(443)
		p2, _ := after.Port(443)
		if p1.vhosts[0] == p2.vhosts[0] || p2.vhosts[0].Certificates[0] == p1.vhosts[0].Certificates[0] {
			t.Fatal("the virtual host kept its old certificate")
		}
		if p1.vhosts[0].routes[0] != p2.vhosts[0].routes[0] || p1.vhosts[0].hosts.any != p2.vhosts[0].hosts.any {
			t.Error("the routes of the virtual host were compiled again for a certificate")
		}
		if bigVHost(t, before) != bigVHost(t, after) {
			t.Error("a virtual host without the certificate was compiled again")
		}
	})
	t.Run("a cluster added that one route names", func(t *testing.T) {
		t.Parallel()
		before, after := derive(t, func(msgs map[string]proto.Message) {
			l := proto.CloneOf(msgs["listener/ns/big/80"].(*discoveryv1.Listener))
			l.VirtualHosts[0].Routes[10].Backends[0].Cluster = "ns/late:80"
			msgs["listener/ns/big/80"] = l
		})
		route := bigVHost(t, after).routes[10]
		if route.Backends[0].Cluster != nil || route.Backends[0].ErrorStatus != 500 {
			t.Fatalf("a backend naming a missing cluster: %+v", route.Backends[0])
		}
		_ = before
	})
}

// Tests that a cluster that comes, goes or comes back recompiles exactly the routes naming it,
// and that a new cluster takes the lowest free slot while the others keep theirs.
func TestUpdateClusterPresence(t *testing.T) {
	t.Parallel()
	msgs, _ := shareBase(t)
	l := proto.CloneOf(msgs["listener/ns/big/80"].(*discoveryv1.Listener))
	l.VirtualHosts[0].Routes[10].Backends[0].Cluster = "ns/late:80"
	msgs["listener/ns/big/80"] = l
	res := encode(t, msgs, nil, nil)
	table, err := Compile(snaptest.Seq(list(res)))
	if err != nil {
		t.Fatal(err)
	}
	step := func(shared int, change func(map[string]proto.Message)) {
		t.Helper()
		next := map[string]proto.Message{}
		for k, v := range msgs {
			next[k] = v
		}
		change(next)
		nextRes := encode(t, next, res, msgs)
		got, err := Update(table, snaptest.Seq(list(nextRes)))
		if err != nil {
			t.Fatal(err)
		}
		want, err := Compile(snaptest.Seq(list(nextRes)))
		if err != nil {
			t.Fatal(err)
		}
		if diff := diffViews(viewOf(want), viewOf(got)); diff != "" {
			t.Fatalf("Update and Compile differ (-compile +update):\n%s", diff)
		}
		checkInvariants(t, got)
		if n := sharedRoutes(bigVHost(t, table), bigVHost(t, got)); n != shared {
			t.Errorf("%d of 1000 routes shared, want %d", n, shared)
		}
		table, msgs, res = got, next, nextRes
	}
	// Routes 1, 5, 9 ... name app-1, 250 of them; route 10 names ns/late:80.
	step(750, func(m map[string]proto.Message) { delete(m, "cluster/ns/app-1:80") })
	step(750, func(m map[string]proto.Message) {
		m["cluster/ns/app-1:80"] = snaptest.Cluster(t, "ns/app-1:80", "10.0.0.1:80")
	})
	if slot := table.clusterNames["ns/app-1:80"].Index; slot != 1 {
		t.Errorf("the cluster that came back has slot %d, want the free slot 1", slot)
	}
	step(999, func(m map[string]proto.Message) {
		m["cluster/ns/late:80"] = snaptest.Cluster(t, "ns/late:80", "10.0.9.9:80")
	})
	route := bigVHost(t, table).routes[10]
	if route.Backends[0].Cluster == nil || table.Cluster(route.Backends[0].Cluster).Name != "ns/late:80" {
		t.Errorf("the route naming the added cluster: %+v", route.Backends[0])
	}
}

// Tests that twenty-five routes inserted one by one at the same place, which use up the room
// between two orders, renumber the virtual host and still give Compile's table.
func TestUpdateRenumbers(t *testing.T) {
	t.Parallel()
	routes := []*discoveryv1.Route{
		snaptest.Route("ns/first/0/0", "", snaptest.Prefix("/a"), "ns/app:80"),
		snaptest.Route("ns/last/0/0", "", snaptest.Prefix("/"), "ns/app:80"),
	}
	var table *Table
	renumbered := false
	for i := range 25 {
		l := snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "", routes...))
		res := snaptest.Resources(t, l, snaptest.Cluster(t, "ns/app:80", "10.0.0.1:80"))
		got, err := Update(table, snaptest.Seq(res))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := Compile(snaptest.Seq(res))
		if diff := diffViews(viewOf(want), viewOf(got)); diff != "" {
			t.Fatalf("insertion %d: Update and Compile differ (-compile +update):\n%s", i, diff)
		}
		checkInvariants(t, got)
		if vh := bigVHost(t, got); vh.routes[1].order == 2*orderGap && i > 1 {
			renumbered = true
		}
		table = got
		r := snaptest.Route(fmt.Sprintf("ns/r%d/0/0", i), "", snaptest.Prefix(fmt.Sprintf("/p%d", i)), "ns/app:80")
		routes = append(routes[:1], append([]*discoveryv1.Route{r}, routes[1:]...)...)
	}
	if !renumbered {
		t.Error("the virtual host was never renumbered")
	}
}

// Tests that a listener whose encoding holds a field split does not expect, or that does not
// decode, is compiled whole: accepted or refused as Compile does it.
func TestUpdateDecodesUnexpectedEncodings(t *testing.T) {
	t.Parallel()
	msgs, _ := shareBase(t)
	res := encode(t, msgs, nil, nil)
	table, err := Compile(snaptest.Seq(list(res)))
	if err != nil {
		t.Fatal(err)
	}
	l := proto.CloneOf(msgs["listener/ns/big/80"].(*discoveryv1.Listener))
	l.VirtualHosts[0].Routes[3].Match = snaptest.Exact("/three")
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	unknownField := protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1)
	cases := map[string][]byte{
		"an unknown field":                   append(append([]byte{}, b...), unknownField...),
		"a truncated payload":                b[:len(b)-3],
		"a virtual host field as a varint":   append(append([]byte{}, b...), protowire.AppendVarint(protowire.AppendTag(nil, 5, protowire.VarintType), 1)...),
		"a port given twice, the last wins":  append(append([]byte{}, b...), protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), 8081)...),
		"invalid UTF-8 in the listener name": append(append([]byte{}, b...), protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "ns/big/\xff")...),
	}
	for name, payload := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			next := map[string]*discoveryv1.Resource{}
			for k, v := range res {
				next[k] = v
			}
			next["listener/ns/big/80"] = &discoveryv1.Resource{Key: "listener/ns/big/80", Payload: &anypb.Any{
				TypeUrl: res["listener/ns/big/80"].GetPayload().GetTypeUrl(), Value: payload,
			}}
			want, wantErr := Compile(snaptest.Seq(list(next)))
			got, err := Update(table, snaptest.Seq(list(next)))
			if (err == nil) != (wantErr == nil) {
				t.Fatalf("Update says %v, Compile says %v", err, wantErr)
			}
			if err != nil {
				return
			}
			if diff := diffViews(viewOf(want), viewOf(got)); diff != "" {
				t.Fatalf("Update and Compile differ (-compile +update):\n%s", diff)
			}
			// A cluster its routes name goes: the listener, whose routes could not be located
			// in its encoding, is decoded again.
			delete(next, "cluster/ns/app-1:80")
			want, err = Compile(snaptest.Seq(list(next)))
			if err != nil {
				t.Fatal(err)
			}
			if got, err = Update(got, snaptest.Seq(list(next))); err != nil {
				t.Fatal(err)
			}
			if diff := diffViews(viewOf(want), viewOf(got)); diff != "" {
				t.Fatalf("after a cluster went, Update and Compile differ (-compile +update):\n%s", diff)
			}
		})
	}
}

// Tests that Update refuses what Compile refuses, however little of the set changed, and
// leaves the table it started from as it was.
func TestUpdateRefuses(t *testing.T) {
	t.Parallel()
	big := func(change func(r *discoveryv1.Route)) func(map[string]proto.Message) {
		return func(msgs map[string]proto.Message) {
			l := proto.CloneOf(msgs["listener/ns/big/80"].(*discoveryv1.Listener))
			change(l.VirtualHosts[0].Routes[42])
			msgs["listener/ns/big/80"] = l
		}
	}
	cases := []struct {
		name   string
		change func(map[string]proto.Message)
	}{
		{"a changed route with an invalid regular expression", big(func(r *discoveryv1.Route) { r.Match = snaptest.Regex("/(") })},
		{"a changed route with a redirect status out of range", big(func(r *discoveryv1.Route) {
			r.Filters = []*discoveryv1.Filter{{Kind: &discoveryv1.Filter_Redirect{Redirect: &discoveryv1.Redirect{Scheme: "https", StatusCode: 200}}}}
		})},
		{"a changed route without a name", big(func(r *discoveryv1.Route) { r.Name = "" })},
		{"a certificate removed that an unchanged listener names", func(m map[string]proto.Message) { delete(m, "certificate/ns/cert") }},
		{"a certificate changed to a key that does not parse", func(m map[string]proto.Message) {
			cert := proto.CloneOf(m["certificate/ns/cert"].(*discoveryv1.Certificate))
			cert.PrivateKeyPem = []byte("junk")
			m["certificate/ns/cert"] = cert
		}},
		{"a cluster changed to an endpoint without a port", func(m map[string]proto.Message) {
			m["cluster/ns/app-1:80"] = &discoveryv1.Cluster{Name: "ns/app-1:80", Endpoints: []*discoveryv1.Endpoint{{Address: "10.0.0.1"}}}
		}},
		{"a listener changed to port zero", func(m map[string]proto.Message) {
			l := proto.CloneOf(m["listener/ns/big/80"].(*discoveryv1.Listener))
			l.Port = 0
			m["listener/ns/big/80"] = l
		}},
		{"an HTTPS virtual host whose certificates are taken away", func(m map[string]proto.Message) {
			l := proto.CloneOf(m["listener/ns/tls/443"].(*discoveryv1.Listener))
			l.VirtualHosts[0].Certificates = nil
			m["listener/ns/tls/443"] = l
		}},
		{"a listener renamed under its key", func(m map[string]proto.Message) {
			l := proto.CloneOf(m["listener/ns/big/80"].(*discoveryv1.Listener))
			l.Name = "ns/other/80"
			m["listener/ns/big/80"] = l
		}},
		{"a cluster under a listener's key", func(m map[string]proto.Message) {
			m["listener/ns/big/80"] = &discoveryv1.Cluster{Name: "ns/big/80"}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			msgs, _ := shareBase(t)
			res := encode(t, msgs, nil, nil)
			table, err := Compile(snaptest.Seq(list(res)))
			if err != nil {
				t.Fatal(err)
			}
			before := viewOf(table)
			next := map[string]proto.Message{}
			for k, v := range msgs {
				next[k] = v
			}
			tc.change(next)
			nextRes := list(encode(t, next, res, msgs))
			if _, err := Compile(snaptest.Seq(nextRes)); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Compile: got %v, want ErrInvalid", err)
			}
			if _, err := Update(table, snaptest.Seq(nextRes)); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Update: got %v, want ErrInvalid", err)
			}
			if diff := diffViews(before, viewOf(table)); diff != "" {
				t.Fatalf("the refused update changed the serving table (-before +after):\n%s", diff)
			}
			if r := bigVHost(t, table).Match("svc-4.example.com", "GET", "/api/v2", request{}); r == nil || r.Name != "bench/route-42/0/0" {
				t.Errorf("the serving table routes to %v", r)
			}
		})
	}
}
