package graph_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/internal/encode"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/graph/conditions"
	"coxswain.dev/coxswain/internal/snapshot"
	"coxswain.dev/coxswain/internal/state"
)

// addListenerSets adds, for each spec, a ListenerSet of namespace ns with n HTTP listeners on
// port 80, each with its own hostname, whose parent is Gateway parent (namespace/name), aged
// after the Gateways and in their order (first is oldest).
func addListenerSets(cs *state.ClusterState, parent string, sets ...nsListenerSet) {
	for _, s := range sets {
		ls := &gwapiv1.ListenerSet{ObjectMeta: metav1.ObjectMeta{
			Namespace: s.ns, Name: s.name, Generation: 1,
			CreationTimestamp: metav1.NewTime(epoch.Add(time.Hour + time.Duration(len(cs.ListenerSets))*time.Minute)),
		}}
		ns, name, _ := cutKey(parent)
		ls.Spec.ParentRef = gwapiv1.ParentGatewayReference{Name: gwapiv1.ObjectName(name), Namespace: (*gwapiv1.Namespace)(&ns)}
		for i := range s.listeners {
			host := gwapiv1.Hostname(fmt.Sprintf("%s-%d.%s.example.com", s.name, i, s.ns))
			ls.Spec.Listeners = append(ls.Spec.Listeners, gwapiv1.ListenerEntry{
				Name: gwapiv1.SectionName(fmt.Sprintf("l%d", i)), Port: 80, Protocol: gwapiv1.HTTPProtocolType, Hostname: &host,
			})
		}
		cs.ListenerSets[state.Key(ls)] = ls
	}
}

type nsListenerSet struct {
	ns, name  string
	listeners int
}

func cutKey(key string) (ns, name string, ok bool) {
	for i := range key {
		if key[i] == '/' {
			return key[:i], key[i+1:], true
		}
	}
	return "", key, false
}

// allowAll lets every namespace attach ListenerSets to the Gateway ns/name.
func allowAll(t *testing.T, cs *state.ClusterState, ns, name string) {
	t.Helper()
	for key, gw := range cs.Gateways {
		if key.Namespace == ns && key.Name == name {
			from := gwapiv1.NamespacesFromAll
			gw.Spec.AllowedListeners = &gwapiv1.AllowedListeners{Namespaces: &gwapiv1.ListenerNamespaces{From: &from}}
			return
		}
	}
	t.Fatalf("no Gateway %s/%s", ns, name)
}

func listenerSetOf(t *testing.T, g *graph.Graph, ns, name string) *graph.ListenerSet {
	t.Helper()
	for _, ls := range g.ListenerSets {
		if ls.Source.Namespace == ns && ls.Source.Name == name {
			return ls
		}
	}
	t.Fatalf("no ListenerSet %s/%s in the graph", ns, name)
	return nil
}

// virtualHosts returns the number of virtual hosts of each listener of the shared pool's
// snapshot.
func virtualHosts(g *graph.Graph) map[string]int {
	out := map[string]int{}
	for _, snap := range snapshot.Compile(g) {
		for _, l := range snap.Listeners {
			out[l.Name] = len(l.VirtualHosts)
		}
	}
	return out
}

// Tests that a Gateway has at most MaxListenerSetsPerGateway ListenerSets attached, the oldest,
// whatever their namespaces: a newer one is Accepted=False and Programmed=False
// (ListenerSetLimitReached) and none of its listeners is served.
func TestListenerSetsPerGatewayCap(t *testing.T) {
	t.Parallel()
	cs := tenantsState(nsGateway{"infra", "shared", []int32{80}})
	allowAll(t, cs, "infra", "shared")
	addListenerSets(cs, "infra/shared", nsListenerSet{"a", "one", 1}, nsListenerSet{"b", "two", 1}, nsListenerSet{"c", "three", 1})
	g := graph.Build(cs, graph.Options{ListenerLimits: graph.ListenerLimits{MaxListenerSetsPerGateway: 2}})
	for _, key := range [][2]string{{"a", "one"}, {"b", "two"}} {
		if ls := listenerSetOf(t, g, key[0], key[1]); !ls.Accepted {
			t.Errorf("ListenerSet %s/%s under the cap is not accepted: %v", key[0], key[1], ls.Conditions)
		}
	}
	three := listenerSetOf(t, g, "c", "three")
	for _, condType := range []string{"Accepted", "Programmed"} {
		if msg := wantCondition(three.Conditions, condType, metav1.ConditionFalse, conditions.ReasonListenerSetLimitReached); msg != "" {
			t.Errorf("ListenerSet c/three: %s", msg)
		}
	}
	if got := virtualHosts(g)["infra/shared/80"]; got != 3 {
		t.Errorf("port 80 serves %d virtual hosts, want the Gateway's and two ListenerSets'", got)
	}
}

// Tests that one namespace has at most MaxListenerSetsPerNamespace ListenerSets attached, the
// oldest, across every Gateway, while another namespace's ListenerSet still attaches.
func TestListenerSetsPerNamespaceCap(t *testing.T) {
	t.Parallel()
	cs := tenantsState(nsGateway{"infra", "one", []int32{80}}, nsGateway{"infra", "two", []int32{80}})
	allowAll(t, cs, "infra", "one")
	allowAll(t, cs, "infra", "two")
	addListenerSets(cs, "infra/one", nsListenerSet{"tenant", "first", 1})
	addListenerSets(cs, "infra/two", nsListenerSet{"tenant", "second", 1}, nsListenerSet{"tenant", "third", 1}, nsListenerSet{"other", "fourth", 1})
	g := graph.Build(cs, graph.Options{ListenerLimits: graph.ListenerLimits{MaxListenerSetsPerNamespace: 2}})
	for _, key := range [][2]string{{"tenant", "first"}, {"tenant", "second"}, {"other", "fourth"}} {
		if ls := listenerSetOf(t, g, key[0], key[1]); !ls.Accepted {
			t.Errorf("ListenerSet %s/%s under the cap is not accepted: %v", key[0], key[1], ls.Conditions)
		}
	}
	third := listenerSetOf(t, g, "tenant", "third")
	if msg := wantCondition(third.Conditions, "Accepted", metav1.ConditionFalse, conditions.ReasonListenerSetLimitReached); msg != "" {
		t.Errorf("ListenerSet tenant/third: %s", msg)
	}
	if want := "Namespace tenant has 2 ListenerSets attached to Gateways, the most allowed; this one is newer"; third.Conditions[0].Message != want {
		t.Errorf("message %q, want %q", third.Conditions[0].Message, want)
	}
}

// Tests that one Gateway port has at most MaxListenersPerPort accepted listeners, its own first,
// then its ListenerSets' in precedence order: a later listener is Accepted=False and
// Programmed=False (ListenerLimitReached) and is no virtual host of the port, its ListenerSet
// stays attached with the listeners that fit, and a ListenerSet none of whose listeners fits is
// not accepted.
func TestListenersPerPortCap(t *testing.T) {
	t.Parallel()
	cs := tenantsState(nsGateway{"infra", "shared", []int32{80}})
	allowAll(t, cs, "infra", "shared")
	addListenerSets(cs, "infra/shared", nsListenerSet{"a", "fits", 2}, nsListenerSet{"b", "half", 2}, nsListenerSet{"c", "late", 1})
	g := graph.Build(cs, graph.Options{ListenerLimits: graph.ListenerLimits{MaxListenersPerPort: 4}})
	if got := virtualHosts(g)["infra/shared/80"]; got != 4 {
		t.Errorf("port 80 serves %d virtual hosts, want 4", got)
	}
	half := listenerSetOf(t, g, "b", "half")
	if !half.Accepted {
		t.Errorf("ListenerSet b/half with one listener that fits is not accepted: %v", half.Conditions)
	}
	var got []string
	for _, ls := range g.ListenerSets {
		for _, l := range ls.Listeners {
			if c := conditions.Find(l.Conditions, "Accepted"); c.Reason == conditions.ReasonListenerLimitReached {
				if msg := wantCondition(l.Conditions, "Programmed", metav1.ConditionFalse, conditions.ReasonListenerLimitReached); msg != "" {
					t.Errorf("listener %s: %s", l.QualifiedName(), msg)
				}
				got = append(got, l.QualifiedName())
			}
		}
	}
	if want := []string{"b/half/l1", "c/late/l0"}; !cmp.Equal(want, got) {
		t.Errorf("refused listeners %v, want %v", got, want)
	}
	if msg := wantCondition(listenerSetOf(t, g, "c", "late").Conditions, "Accepted", metav1.ConditionFalse, string(gwapiv1.ListenerSetReasonListenersNotValid)); msg != "" {
		t.Errorf("ListenerSet c/late: %s", msg)
	}
}

// listenerSetsState holds the shared Gateway infra/shared, which allows ListenerSets from every
// namespace, and sets ListenerSets of 64 HTTP listeners, each with its own hostname, perNS to a
// namespace, listener i of set s on port(s, i), and for each ListenerSet an HTTPRoute that
// attaches to every listener of it.
func listenerSetsState(sets, perNS int, port func(s, i int) int32) *state.ClusterState {
	cs := tenantsState(nsGateway{"infra", "shared", []int32{80}})
	from := gwapiv1.NamespacesFromAll
	for _, gw := range cs.Gateways {
		gw.Spec.AllowedListeners = &gwapiv1.AllowedListeners{Namespaces: &gwapiv1.ListenerNamespaces{From: &from}}
	}
	group, kind, parentNS := gwapiv1.Group(gwapiv1.GroupName), gwapiv1.Kind("ListenerSet"), gwapiv1.Namespace("infra")
	for s := range sets {
		ns := gwapiv1.Namespace(fmt.Sprintf("tenant-%d", s/perNS))
		ls := &gwapiv1.ListenerSet{ObjectMeta: metav1.ObjectMeta{
			Namespace: string(ns), Name: fmt.Sprintf("set-%d", s), Generation: 1,
			CreationTimestamp: metav1.NewTime(epoch.Add(time.Hour + time.Duration(s)*time.Minute)),
		}}
		ls.Spec.ParentRef = gwapiv1.ParentGatewayReference{Name: "shared", Namespace: &parentNS}
		for i := range 64 {
			host := gwapiv1.Hostname(fmt.Sprintf("h%d-%d.example.com", s, i))
			ls.Spec.Listeners = append(ls.Spec.Listeners, gwapiv1.ListenerEntry{
				Name: gwapiv1.SectionName(fmt.Sprintf("l%d", i)), Port: gwapiv1.PortNumber(port(s, i)), Protocol: gwapiv1.HTTPProtocolType, Hostname: &host,
			})
		}
		cs.ListenerSets[state.Key(ls)] = ls
		r := &gwapiv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: string(ns), Name: fmt.Sprintf("route-%d", s), Generation: 1}}
		r.Spec.ParentRefs = []gwapiv1.ParentReference{{Group: &group, Kind: &kind, Namespace: &ns, Name: gwapiv1.ObjectName(ls.Name)}}
		r.Spec.Rules = []gwapiv1.HTTPRouteRule{{}}
		cs.HTTPRoutes[state.Key(r)] = r
	}
	return cs
}

// BenchmarkListenerSetsAtTheirCaps measures Build, Compile and the encoding of the shared pool
// with one Gateway at the default caps: 256 ListenerSets of 64 listeners from two namespaces,
// 16 ports of 1,024 listeners; and with the 100 ListenerSets of 64 listeners of one namespace
// on one port, which the port's cap brings to 1,024 listeners.
func BenchmarkListenerSetsAtTheirCaps(b *testing.B) {
	for _, bc := range []struct {
		name        string
		sets, perNS int
		port        func(s, i int) int32
	}{
		{"one-port", 100, 100, func(int, int) int32 { return 80 }},
		{"default-caps", 256, 128, func(s, i int) int32 { return int32(8000 + (s*64+i)/1024) }}, //nolint:gosec // small
	} {
		cs := listenerSetsState(bc.sets, bc.perNS, bc.port)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := encode.All(snapshot.Compile(graph.Build(cs, graph.Options{}))); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
