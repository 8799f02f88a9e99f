package router

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/routeset"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// world is a resource set that changes at random, as the controller's deltas change it: a
// few listeners, clusters and certificates, routes with every kind of match, filter and
// backend, some naming clusters or certificates the set lacks, some invalid.
type world struct {
	// uniqueVHosts names every virtual host apart, as the controller does: route sets are keyed
	// by virtual host name. Without it names repeat, as nothing in a listener forbids it.
	uniqueVHosts bool
	vhosts       int
	rng          *rand.Rand
	certs        []*discoveryv1.Certificate
	resources    map[string]proto.Message
	payloads     map[string]*anypb.Any
	next         int
}

func newWorld(t *testing.T, seed uint64) *world {
	w := &world{rng: rand.New(rand.NewPCG(seed, 7)), resources: map[string]proto.Message{}, payloads: map[string]*anypb.Any{}}
	for i := range 2 {
		cert, _ := snaptest.Certificate(t, "unused", fmt.Sprintf("c%d.example.com", i))
		w.certs = append(w.certs, cert)
	}
	return w
}

func (w *world) pick(n int) int { return w.rng.IntN(n) }

func (w *world) chance(p float64) bool { return w.rng.Float64() < p }

func (w *world) set(msg proto.Message) { w.resources[snaptest.Key(msg)] = msg }

// step makes one to three changes.
func (w *world) step() {
	for range 1 + w.pick(3) {
		switch n := w.pick(10); {
		case n < 2:
			w.changeCluster()
		case n < 3:
			w.changeCertificate()
		default:
			w.changeListener()
		}
	}
}

func (w *world) changeCluster() {
	name := fmt.Sprintf("ns/c%d", w.pick(6))
	if w.chance(0.25) {
		delete(w.resources, ClusterKeyPrefix+name)
		return
	}
	cl := &discoveryv1.Cluster{Name: name}
	for range w.pick(3) {
		cl.Endpoints = append(cl.Endpoints, &discoveryv1.Endpoint{Address: fmt.Sprintf("10.0.0.%d", w.pick(4)), Port: 80})
	}
	if w.chance(0.15) {
		cl.UpstreamProtocol = discoveryv1.UpstreamProtocol_UPSTREAM_PROTOCOL_H2C
	}
	if w.chance(0.03) {
		cl.Endpoints = append(cl.Endpoints, &discoveryv1.Endpoint{Address: "10.0.0.9"}) // invalid: no port
	}
	w.set(cl)
}

func (w *world) changeCertificate() {
	name := fmt.Sprintf("ns/k%d", w.pick(3))
	if w.chance(0.2) {
		delete(w.resources, CertificateKeyPrefix+name)
		return
	}
	cert := proto.CloneOf(w.certs[w.pick(len(w.certs))])
	cert.Name = name
	if w.chance(0.03) {
		cert.PrivateKeyPem = []byte("junk")
	}
	w.set(cert)
}

func (w *world) changeListener() {
	i := w.pick(4)
	key := fmt.Sprintf("%sns/g%d/%d", ListenerKeyPrefix, i, []uint32{80, 443, 8080}[i%3])
	old, ok := w.resources[key].(*discoveryv1.Listener)
	if !ok {
		w.set(w.listener(i))
		return
	}
	l := proto.CloneOf(old)
	switch n := w.pick(20); {
	case n == 0:
		delete(w.resources, key)
		return
	case n == 1:
		l.Protocol = discoveryv1.Protocol(3 - int(l.GetProtocol())) // HTTP and HTTPS swap
	case n == 2 || len(l.GetVirtualHosts()) == 0:
		l.VirtualHosts = append(l.VirtualHosts, w.vhost(len(l.GetVirtualHosts())))
	case n == 3:
		l.VirtualHosts = slices.Delete(l.VirtualHosts, 0, 1)
	case n == 4:
		vh := l.VirtualHosts[w.pick(len(l.VirtualHosts))]
		vh.Hostname, vh.Certificates = w.hostname(), w.certNames()
	default:
		w.changeRoutes(l.VirtualHosts[w.pick(len(l.VirtualHosts))])
	}
	w.set(l)
}

func (w *world) changeRoutes(vh *discoveryv1.VirtualHost) {
	rs := vh.GetRoutes()
	if len(rs) > 60 {
		// Keep virtual hosts small enough for the walk to stay quick under the race detector.
		at := w.pick(len(rs) - 20)
		vh.Routes = slices.Delete(rs, at, at+20)
		return
	}
	switch n := w.pick(7); {
	case n == 0 && len(rs) > 0:
		rs[w.pick(len(rs))] = w.route()
	case n == 1 && len(rs) > 0:
		i := w.pick(len(rs))
		rs = slices.Delete(rs, i, i+1)
	case n == 2 && len(rs) > 1:
		i := w.pick(len(rs))
		r := rs[i]
		rs = slices.Delete(rs, i, i+1)
		rs = slices.Insert(rs, w.pick(len(rs)+1), r)
	case n == 3:
		// Insertions after the first route, again and again, use up the room between two
		// orders.
		rs = slices.Insert(rs, min(1, len(rs)), w.route())
	case n == 4:
		at := w.pick(len(rs) + 1)
		for range 2 + w.pick(20) {
			rs = slices.Insert(rs, at, w.route())
		}
	default:
		rs = slices.Insert(rs, w.pick(len(rs)+1), w.route())
	}
	vh.Routes = rs
}

func (w *world) listener(i int) *discoveryv1.Listener {
	l := snaptest.HTTP(fmt.Sprintf("ns/g%d", i), []uint32{80, 443, 8080}[i%3])
	if w.chance(0.4) {
		l.Protocol = discoveryv1.Protocol_PROTOCOL_HTTPS
	}
	for j := range 1 + w.pick(3) {
		l.VirtualHosts = append(l.VirtualHosts, w.vhost(j))
	}
	return l
}

func (w *world) vhost(i int) *discoveryv1.VirtualHost {
	if w.uniqueVHosts {
		w.vhosts++
		i = w.vhosts
	}
	vh := &discoveryv1.VirtualHost{Name: fmt.Sprintf("vh%d", i), Hostname: w.hostname(), Certificates: w.certNames()}
	for range w.pick(12) {
		vh.Routes = append(vh.Routes, w.route())
	}
	return vh
}

func (w *world) hostname() string {
	return []string{"", "a.example.com", "*.example.com", "b.example.com"}[w.pick(4)]
}

func (w *world) certNames() []string {
	if w.chance(0.3) {
		return nil
	}
	names := []string{fmt.Sprintf("ns/k%d", w.pick(3))}
	if w.chance(0.3) {
		names = append(names, fmt.Sprintf("ns/k%d", w.pick(3)))
	}
	return names
}

func (w *world) route() *discoveryv1.Route {
	w.next++
	paths := []*discoveryv1.RouteMatch{
		snaptest.Prefix("/"), snaptest.Prefix("/a"), snaptest.Prefix("/a/b"), snaptest.Prefix("/b/"),
		snaptest.Exact("/a"), snaptest.Exact("/c"), snaptest.Regex("/r[0-9]+"), snaptest.Regex("/a.*"),
	}
	r := &discoveryv1.Route{
		Name:     fmt.Sprintf("ns/r%d/0/0", w.next%40), // names repeat, as nothing forbids it
		Hostname: []string{"", "", "a.example.com", "x.b.example.com", "*.example.com"}[w.pick(5)],
		Match:    proto.CloneOf(paths[w.pick(len(paths))]),
	}
	if w.chance(0.2) {
		r.Match.Method = "GET"
	}
	if w.chance(0.15) {
		r.Match.Headers = []*discoveryv1.ValueMatch{{Name: "x-v", Value: fmt.Sprint(w.pick(3))}}
	}
	if w.chance(0.03) {
		r.Match = snaptest.Regex("/(") // invalid
	}
	for range 1 + w.pick(2) {
		b := &discoveryv1.WeightedBackend{Cluster: fmt.Sprintf("ns/c%d", w.pick(8)), Weight: uint32(w.pick(4))}
		if w.chance(0.1) {
			b.ErrorStatus = 503
		}
		r.Backends = append(r.Backends, b)
	}
	if w.chance(0.15) {
		r.Filters = append(r.Filters, &discoveryv1.Filter{Kind: &discoveryv1.Filter_Mirror{Mirror: &discoveryv1.Mirror{
			Cluster: fmt.Sprintf("ns/c%d", w.pick(8)), Numerator: uint32(w.pick(2)), Denominator: 2,
		}}})
	}
	if w.chance(0.1) {
		r.Filters = append(r.Filters, &discoveryv1.Filter{Kind: &discoveryv1.Filter_ResponseHeaders{ResponseHeaders: &discoveryv1.HeaderModifier{
			Set: []*discoveryv1.Header{{Name: "x-route", Value: r.GetName()}},
		}}})
	}
	return r
}

// payloadsOf encodes the resources the way the controller does, keeping the payload of every
// resource that did not change, as a merged delta does; fresh re-encodes every one, as a full
// snapshot after a reconnect does.
func (w *world) payloadsOf(t *testing.T, fresh bool) []*discoveryv1.Resource {
	return w.encode(t, w.resources, fresh)
}

// splitPayloadsOf is payloadsOf with every listener's routes in RouteSets (routeset.Split), as
// the controller sends them to a proxy that subscribed with route_sets.
func (w *world) splitPayloadsOf(t *testing.T, fresh bool) []*discoveryv1.Resource {
	msgs := make(map[string]proto.Message, len(w.resources))
	for key, m := range w.resources {
		l, ok := m.(*discoveryv1.Listener)
		if !ok {
			msgs[key] = m
			continue
		}
		head, sets := routeset.Split(l)
		msgs[key] = head
		for _, s := range sets {
			msgs[routeset.Key(s.GetListener(), s.GetVirtualHost(), s.GetHostname())] = s
		}
	}
	return w.encode(t, msgs, fresh)
}

// groupedPayloadsOf encodes the resources afresh with each virtual host's routes in the order
// of their route sets: what a proxy assembles from splitPayloadsOf.
func (w *world) groupedPayloadsOf(t *testing.T) []*discoveryv1.Resource {
	msgs := make(map[string]proto.Message, len(w.resources))
	for key, m := range w.resources {
		if l, ok := m.(*discoveryv1.Listener); ok {
			l = proto.CloneOf(l)
			for _, vh := range l.GetVirtualHosts() {
				slices.SortStableFunc(vh.Routes, func(a, b *discoveryv1.Route) int { return routeset.Compare(a.GetHostname(), b.GetHostname()) })
			}
			m = l
		}
		msgs[key] = m
	}
	return (&world{}).encode(t, msgs, true)
}

func (w *world) encode(t *testing.T, msgs map[string]proto.Message, fresh bool) []*discoveryv1.Resource {
	t.Helper()
	keys := slices.Sorted(maps.Keys(msgs))
	out := make([]*discoveryv1.Resource, 0, len(keys))
	payloads := map[string]*anypb.Any{}
	for _, key := range keys {
		a := &anypb.Any{}
		if err := anypb.MarshalFrom(a, msgs[key], proto.MarshalOptions{Deterministic: true}); err != nil {
			t.Fatal(err)
		}
		if old, ok := w.payloads[key]; ok && !fresh && proto.Equal(old, a) {
			a = old
		}
		payloads[key] = a
		out = append(out, &discoveryv1.Resource{Key: key, Payload: a})
	}
	w.payloads = payloads
	return out
}

// diffViews returns the differences between two views, an empty and a nil slice or map being
// equal; cmp runs only when reflect cannot tell, as it is slow on tables this size.
func diffViews(a, b tableView) string {
	if reflect.DeepEqual(a, b) {
		return ""
	}
	return cmp.Diff(a, b, cmpopts.EquateEmpty())
}

// Tests that a table Update derives through a random sequence of deltas is the table Compile
// builds from scratch from the same set, that both refuse the same sets, and that a refused
// set leaves the table it was derived from as it was.
func TestUpdateMatchesCompile(t *testing.T) {
	t.Parallel()
	for seed := range uint64(10) {
		// Seeds from 5 send every listener's routes in route sets; Update must then build what
		// Compile builds from the listeners with their routes inside, in the sets' order.
		split := seed >= 5
		t.Run(fmt.Sprintf("seed=%d/routesets=%t", seed, split), func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, seed)
			w.uniqueVHosts = split
			var current *Table
			good := maps.Clone(w.resources)
			var accepted, refused int
			for step := range 250 {
				w.step()
				fresh := w.chance(0.1)
				res := w.payloadsOf(t, fresh)
				if split {
					res = w.splitPayloadsOf(t, fresh)
				}
				wantRes := res
				if split {
					wantRes = w.groupedPayloadsOf(t)
				}
				want, wantErr := Compile(snaptest.Seq(wantRes))
				var before tableView
				if current != nil {
					before = viewOf(current)
				}
				got, err := Update(current, snaptest.Seq(res))
				if (err == nil) != (wantErr == nil) {
					t.Fatalf("step %d: Update says %v, Compile says %v", step, err, wantErr)
				}
				if current != nil {
					if diff := diffViews(before, viewOf(current)); diff != "" {
						t.Fatalf("step %d: Update changed the table it started from (-before +after):\n%s", step, diff)
					}
				}
				if err != nil {
					// The agent merges the next delta over the last set applied.
					refused++
					w.resources = maps.Clone(good)
					continue
				}
				accepted++
				checkInvariants(t, got)
				if diff := diffViews(viewOf(want), viewOf(got)); diff != "" {
					t.Fatalf("step %d: Update and Compile differ (-compile +update):\n%s", step, diff)
				}
				sameMatches(t, want, got)
				current, good = got, maps.Clone(w.resources)
			}
			if accepted < 80 || refused < 10 {
				t.Errorf("%d sets accepted and %d refused: the walk does not cover both", accepted, refused)
			}
		})
	}
}

// sameMatches routes a grid of requests through both tables.
func sameMatches(t *testing.T, want, got *Table) {
	t.Helper()
	hosts := []string{"a.example.com", "b.example.com", "x.b.example.com", "y.example.com", "other.org"}
	paths := []string{"/", "/a", "/a/", "/a/b/c", "/b", "/b/x", "/c", "/r7", "/ax"}
	for _, wp := range want.Ports() {
		gp, _ := got.Port(wp.Number)
		for _, host := range hosts {
			wv, wok := wp.VirtualHost(host)
			gv, gok := gp.VirtualHost(host)
			if wok != gok || wok && (wv.Listener != gv.Listener || wv.Name != gv.Name) {
				t.Fatalf("port %d host %s: virtual hosts differ", wp.Number, host)
			}
			if !wok {
				continue
			}
			for _, path := range paths {
				for _, req := range []request{{}, {headers: map[string]string{"x-v": "1"}}} {
					wr, gr := wv.Match(host, "GET", path, req), gv.Match(host, "GET", path, req)
					if (wr == nil) != (gr == nil) || wr != nil && viewOf1(wr) != viewOf1(gr) {
						t.Fatalf("port %d %s%s: routes differ", wp.Number, host, path)
					}
				}
			}
		}
	}
}

func viewOf1(r *Route) string { return fmt.Sprintf("%s %v", r.Name, viewOfRoute(r).Backends) }

// request is a Request over a map.
type request struct{ headers map[string]string }

func (r request) Header(name string) (string, bool) {
	v, ok := r.headers[name]
	return v, ok
}

func (request) Query(string) (string, bool) { return "", false }
