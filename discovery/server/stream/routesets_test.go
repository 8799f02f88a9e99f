package stream

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/routeset"
	"coxswain.dev/coxswain/discovery/server/cache"
)

// routeSetSnapshot sets webScope to a listener of two virtual hosts whose routes come in route
// sets, and returns the listener with its routes inside.
func routeSetSnapshot(t *testing.T, e *env, paths ...string) *discoveryv1.Listener {
	t.Helper()
	l := &discoveryv1.Listener{Name: "prod/web/80", Port: 80, Protocol: discoveryv1.Protocol_PROTOCOL_HTTP}
	for _, name := range []string{"http", "prod/set/extra"} {
		vh := &discoveryv1.VirtualHost{Name: name}
		for _, host := range []string{"a.example.com", "*.example.com", ""} {
			for _, p := range paths {
				vh.Routes = append(vh.Routes, &discoveryv1.Route{Name: "prod/r/0/0", Hostname: host, Match: &discoveryv1.RouteMatch{Path: &discoveryv1.PathMatch{Value: p}}})
			}
		}
		l.VirtualHosts = append(l.VirtualHosts, vh)
	}
	head, sets := routeset.Split(l)
	res := []*discoveryv1.Resource{mustResource(t, routeset.ListenerKeyPrefix+l.GetName(), head)}
	for _, s := range sets {
		res = append(res, mustResource(t, routeset.Key(s.GetListener(), s.GetVirtualHost(), s.GetHostname()), s))
	}
	if _, err := e.cache.Set(webScope, res); err != nil {
		t.Fatal(err)
	}
	return l
}

func mustResource(t *testing.T, key string, m proto.Message) *discoveryv1.Resource {
	t.Helper()
	r, err := cache.NewResource(key, m)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Tests that a proxy that subscribes with route_sets gets the snapshot as the cache holds it,
// route sets and all, and one that does not gets each listener with its routes inside, under
// the version of those resources, first in full and then as deltas; that both are reported as
// holding the cache's version, which converges once both acknowledge it.
func TestRouteSetsGoOnlyToProxiesThatAskForThem(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	converged := map[string]bool{}
	e := newEnv(t, func(c *Config) {
		c.OnConverged = func(scope cache.Scope, snap *cache.Snapshot, _ time.Time) {
			mu.Lock()
			defer mu.Unlock()
			converged[snap.Version()] = true
		}
	})
	want := routeSetSnapshot(t, e, "/a", "/b")
	primary := e.cache.Get(webScope)

	sets := subscribeMessage("sets", webScope)
	sets.GetSubscribe().RouteSets = true
	withSets := open(t, e.client(t, e.pki.SVID(t, webID)), sets)
	inline := e.subscribe(t, webID, "inline", webScope)

	got := withSets.mustRecv()
	if got.GetVersion() != primary.Version() || len(got.GetResources()) != primary.Len() {
		t.Fatalf("proxy with route sets got version %s with %d resources, want the cache's %s with %d", got.GetVersion(), len(got.GetResources()), primary.Version(), primary.Len())
	}
	old := inline.mustRecv()
	checkInline(t, old, want)
	withSets.ack(got)
	inline.ack(old)
	waitFor(t, "both proxies reported on the cache's version", func() bool {
		states := e.srv.Proxies(webScope)
		return len(states) == 2 && states[0].Acked == primary.Version() && states[1].Acked == primary.Version()
	})
	waitFor(t, "the cache's version converged", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return converged[primary.Version()]
	})

	want = routeSetSnapshot(t, e, "/a", "/c")
	next := inline.mustRecv()
	if next.GetFull() || len(next.GetResources()) != 1 || next.GetResources()[0].GetKey() != routeset.ListenerKeyPrefix+"prod/web/80" {
		t.Fatalf("inline delta: full %t, resources %v; want the listener alone", next.GetFull(), next.GetResources())
	}
	checkInline(t, next, want)
	if d := withSets.mustRecv(); d.GetFull() || len(d.GetResources()) != 6 || len(d.GetRemovedKeys()) != 0 {
		t.Fatalf("route set delta: full %t, %d resources, removed %v; want the six sets", d.GetFull(), len(d.GetResources()), d.GetRemovedKeys())
	}
}

// checkInline checks that snap holds the listener with its routes inside, grouped by hostname
// as routeset.Assemble orders them, under the version of its resources.
func checkInline(t *testing.T, snap *discoveryv1.Snapshot, want *discoveryv1.Listener) {
	t.Helper()
	var l discoveryv1.Listener
	for _, r := range snap.GetResources() {
		if r.GetPayload().GetTypeUrl() == routeset.TypeURL() {
			t.Fatalf("inline snapshot holds route set %s", r.GetKey())
		}
		if r.GetKey() == routeset.ListenerKeyPrefix+want.GetName() {
			if err := r.GetPayload().UnmarshalTo(&l); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !proto.Equal(&l, want) {
		t.Fatalf("inline listener\n%v\nwant\n%v", &l, want)
	}
	if snap.GetFull() {
		s, err := cache.NewSnapshot(snap.GetResources(), time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if s.Version() != snap.GetVersion() {
			t.Fatalf("inline snapshot's version %s is not its resources' %s", snap.GetVersion(), s.Version())
		}
	}
}

// Tests that a stream without route sets of a scope whose snapshot encodes to more than
// MaxInlineBytes is closed with ResourceExhausted (InlineTooLarge) and sent nothing, while a
// stream with route sets of the same scope is served: a proxy that predates RouteSets, or an
// identity that claims to, cannot make the controller assemble and encode a second layout of a
// large scope.
func TestInlineLayoutIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.MaxInlineBytes = 1024 })
	routeSetSnapshot(t, e, "/a", "/b", "/c", "/d", "/e", "/f", "/g", "/h")
	primary := e.cache.Get(webScope)
	if primary.EncodedSize() <= 1024 {
		t.Fatalf("snapshot of %d bytes, want more than the bound", primary.EncodedSize())
	}
	sets := subscribeMessage("sets", webScope)
	sets.GetSubscribe().RouteSets = true
	if got := open(t, e.client(t, e.pki.SVID(t, webID)), sets).mustRecv(); got.GetVersion() != primary.Version() {
		t.Fatalf("proxy with route sets got version %s, want %s", got.GetVersion(), primary.Version())
	}
	snap, err := e.subscribe(t, webID, "inline", webScope).recv()
	if status.Code(err) != codes.ResourceExhausted || snap != nil || !strings.Contains(status.Convert(err).Message(), "route sets") {
		t.Fatalf("stream without route sets: snapshot %v, error %v; want ResourceExhausted saying why and nothing", snap, err)
	}
	if got := testutil.ToFloat64(e.srv.metrics.denied.WithLabelValues(string(ReasonInlineTooLarge))); got != 1 {
		t.Errorf("closed{InlineTooLarge} = %v, want 1", got)
	}
}
