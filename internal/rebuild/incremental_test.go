package rebuild

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwapiv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/scopeauth"
	"coxswain.dev/coxswain/internal/state"
)

// statusRecorder keeps the status of the last graph it was given, and its clusters, as JSON.
type statusRecorder struct{ last []byte }

func (w *statusRecorder) Write(_ context.Context, _ *state.ClusterState, g *graph.Graph) (int, error) {
	b, err := json.Marshal(struct {
		Status   any
		Clusters []*graph.Cluster
	}{g.Status(), g.Clusters})
	w.last = b
	return 0, err
}

// churn is a cluster that random events change: the Gateways, Secrets and classes of
// internal/graph's scopes case (two shared pool Gateways, two dedicated ones, two certificates),
// shared-a admitting the ListenerSets of labelled namespaces and by-class those of any
// namespace, whose listener takes the routes of labelled namespaces; and routes, Services,
// EndpointSlices, ReferenceGrants, ListenerSets and namespace labels that come and go.
type churn struct {
	rnd   *rand.Rand
	cs    *state.ClusterState
	rv    int
	base  *state.ClusterState
	certs [][2][]byte
}

func newChurn(t *testing.T, seed uint64) *churn {
	t.Helper()
	raw, err := os.ReadFile("../graph/testdata/scopes.in.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cs, err := state.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	base, _ := state.Decode(bytes.NewReader(raw))
	for _, s := range []*state.ClusterState{cs, base} {
		a := s.Gateways[types.NamespacedName{Namespace: "default", Name: "shared-a"}]
		a.Spec.AllowedListeners = &gwapiv1.AllowedListeners{Namespaces: &gwapiv1.ListenerNamespaces{
			From:     ptr.To(gwapiv1.NamespacesFromSelector),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"listeners": "allowed"}},
		}}
		c := s.Gateways[types.NamespacedName{Namespace: "default", Name: "by-class"}]
		c.Spec.AllowedListeners = &gwapiv1.AllowedListeners{Namespaces: &gwapiv1.ListenerNamespaces{From: ptr.To(gwapiv1.NamespacesFromAll)}}
		c.Spec.Listeners[0].AllowedRoutes = &gwapiv1.AllowedRoutes{Namespaces: &gwapiv1.RouteNamespaces{
			From:     ptr.To(gwapiv1.NamespacesFromSelector),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"routes": "allowed"}},
		}}
	}
	w := &churn{rnd: rand.New(rand.NewPCG(seed, seed)), cs: cs, base: base}
	for _, s := range cs.Secrets {
		w.certs = append(w.certs, [2][]byte{s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]})
	}
	for _, ns := range []string{"default", "team"} {
		cs.Namespaces[types.NamespacedName{Name: ns}] = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	}
	return w
}

func (w *churn) pick(options ...string) string { return options[w.rnd.IntN(len(options))] }

// stamp gives an object written by an event a new resourceVersion, as the API server does.
func (w *churn) stamp(m metav1.Object) {
	w.rv++
	m.SetResourceVersion(strconv.Itoa(w.rv))
}

func (w *churn) key(kind string, n int) types.NamespacedName {
	return types.NamespacedName{Namespace: w.pick("default", "team"), Name: fmt.Sprintf("%s-%d", kind, w.rnd.IntN(n))}
}

// step applies one random event and returns what it did.
func (w *churn) step() string {
	switch op := w.rnd.IntN(16); op {
	case 0, 1, 2:
		r := w.route()
		w.cs.HTTPRoutes[state.Key(r)] = r
		return "upsert route " + state.Key(r).String()
	case 3:
		key := w.key("route", 8)
		delete(w.cs.HTTPRoutes, key)
		return "delete route " + key.String()
	case 4:
		s := w.service()
		w.cs.Services[state.Key(s)] = s
		return "upsert service " + state.Key(s).String()
	case 5:
		key := w.key("svc", 4)
		delete(w.cs.Services, key)
		return "delete service " + key.String()
	case 6, 7:
		s := w.slice()
		w.cs.EndpointSlices[state.Key(s)] = s
		return "upsert endpointslice " + state.Key(s).String()
	case 8:
		key := w.key("svc", 4)
		key.Name += "-slice"
		delete(w.cs.EndpointSlices, key)
		return "delete endpointslice " + key.String()
	case 9:
		return w.secret()
	case 10:
		return w.gateway()
	case 11:
		return w.grant()
	case 12, 13:
		return w.listenerSet()
	case 14:
		return w.grpcRoute()
	default:
		return w.namespace()
	}
}

func (w *churn) route() *gwapiv1.HTTPRoute {
	key := w.key("route", 8)
	r := &gwapiv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{
		Namespace: key.Namespace, Name: key.Name,
		CreationTimestamp: metav1.Unix(int64(w.rnd.IntN(3)), 0),
	}}
	w.stamp(r)
	for range 1 + w.rnd.IntN(2) {
		ref := gwapiv1.ParentReference{Name: gwapiv1.ObjectName(w.pick("shared-a", "shared-b", "by-class", "by-infra")), Namespace: ptr.To(gwapiv1.Namespace("default"))}
		if w.rnd.IntN(4) == 0 {
			ls := w.key("ls", 3)
			ref = gwapiv1.ParentReference{
				Group: ptr.To(gwapiv1.Group(gwapiv1.GroupName)), Kind: ptr.To(gwapiv1.Kind("ListenerSet")),
				Name: gwapiv1.ObjectName(ls.Name), Namespace: ptr.To(gwapiv1.Namespace(ls.Namespace)),
			}
		}
		if w.rnd.IntN(3) == 0 {
			ref.SectionName = ptr.To(gwapiv1.SectionName(w.pick("http", "https", "extra")))
		}
		r.Spec.ParentRefs = append(r.Spec.ParentRefs, ref)
	}
	for range w.rnd.IntN(3) {
		r.Spec.Hostnames = append(r.Spec.Hostnames, gwapiv1.Hostname(w.pick("a.example.com", "b.example.com", "*.example.com", "edge.example.com")))
	}
	for range 1 + w.rnd.IntN(2) {
		var rule gwapiv1.HTTPRouteRule
		for range 1 + w.rnd.IntN(2) {
			typ := gwapiv1.PathMatchType(w.pick(string(gwapiv1.PathMatchPathPrefix), string(gwapiv1.PathMatchExact)))
			rule.Matches = append(rule.Matches, gwapiv1.HTTPRouteMatch{Path: &gwapiv1.HTTPPathMatch{Type: &typ, Value: ptr.To(w.pick("/", "/x", "/y/z"))}})
		}
		for range w.rnd.IntN(3) {
			ns := w.pick("default", "team")
			ref := gwapiv1.HTTPBackendRef{BackendRef: gwapiv1.BackendRef{
				BackendObjectReference: gwapiv1.BackendObjectReference{Name: gwapiv1.ObjectName(fmt.Sprintf("svc-%d", w.rnd.IntN(4))), Port: ptr.To(gwapiv1.PortNumber(8080))},
				Weight:                 ptr.To(int32(w.rnd.IntN(3))),
			}}
			if ns != key.Namespace {
				ref.Namespace = ptr.To(gwapiv1.Namespace(ns))
			}
			rule.BackendRefs = append(rule.BackendRefs, ref)
		}
		if w.rnd.IntN(3) == 0 {
			rule.Filters = append(rule.Filters, gwapiv1.HTTPRouteFilter{
				Type:                  gwapiv1.HTTPRouteFilterRequestHeaderModifier,
				RequestHeaderModifier: &gwapiv1.HTTPHeaderFilter{Set: []gwapiv1.HTTPHeader{{Name: "x-step", Value: strconv.Itoa(w.rv)}}},
			})
		}
		if w.rnd.IntN(4) == 0 {
			rule.Filters = append(rule.Filters, gwapiv1.HTTPRouteFilter{
				Type: gwapiv1.HTTPRouteFilterRequestMirror,
				RequestMirror: &gwapiv1.HTTPRequestMirrorFilter{BackendRef: gwapiv1.BackendObjectReference{
					Name: gwapiv1.ObjectName(fmt.Sprintf("svc-%d", w.rnd.IntN(4))), Port: ptr.To(gwapiv1.PortNumber(8080)),
				}},
			})
		}
		r.Spec.Rules = append(r.Spec.Rules, rule)
	}
	return r
}

func (w *churn) service() *corev1.Service {
	key := w.key("svc", 4)
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	w.stamp(s)
	port := corev1.ServicePort{Name: "http", Port: 8080, TargetPort: intstr.FromInt32(80)}
	if w.rnd.IntN(4) == 0 {
		port.Port = 9090
	}
	if w.rnd.IntN(3) == 0 {
		port.AppProtocol = ptr.To("kubernetes.io/h2c")
	}
	s.Spec.Ports = []corev1.ServicePort{port}
	s.Spec.Selector = map[string]string{"app": key.Name}
	return s
}

func (w *churn) slice() *discoveryv1.EndpointSlice {
	key := w.key("svc", 4)
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{
		Namespace: key.Namespace, Name: key.Name + "-slice", Labels: map[string]string{
			discoveryv1.LabelServiceName: key.Name, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io",
		},
	}}
	w.stamp(s)
	s.AddressType = discoveryv1.AddressTypeIPv4
	s.Ports = []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(80))}}
	for i := range 1 + w.rnd.IntN(3) {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.0.%d.%d", w.rnd.IntN(4), i+1)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(w.rnd.IntN(5) > 0)},
		})
	}
	return s
}

// secret swaps a listener certificate for another valid one, or deletes it, or brings it back.
func (w *churn) secret() string {
	name := w.pick("shared-b-cert", "edge-cert")
	key := types.NamespacedName{Namespace: "default", Name: name}
	if w.rnd.IntN(4) == 0 {
		delete(w.cs.Secrets, key)
		return "delete secret " + key.String()
	}
	s := w.base.Secrets[key].DeepCopy()
	pair := w.certs[w.rnd.IntN(len(w.certs))]
	s.Data = map[string][]byte{corev1.TLSCertKey: pair[0], corev1.TLSPrivateKeyKey: pair[1]}
	w.stamp(s)
	w.cs.Secrets[key] = s
	return "upsert secret " + key.String()
}

// gateway deletes or restores a Gateway, or changes a listener hostname, or moves by-infra
// between its dedicated proxy and the shared pool.
func (w *churn) gateway() string {
	name := w.pick("shared-a", "shared-b", "by-class", "by-infra")
	key := types.NamespacedName{Namespace: "default", Name: name}
	gw := w.base.Gateways[key].DeepCopy()
	w.stamp(gw)
	switch w.rnd.IntN(4) {
	case 0:
		delete(w.cs.Gateways, key)
		return "delete gateway " + key.String()
	case 1:
		gw.Spec.Listeners[0].Hostname = ptr.To(gwapiv1.Hostname(w.pick("a.example.com", "*.example.com")))
	case 2:
		gw.Spec.Infrastructure = nil
	}
	w.cs.Gateways[key] = gw
	return "upsert gateway " + key.String()
}

// grant lets routes of one namespace reach the Services of the other, or stops it.
func (w *churn) grant() string {
	from := w.pick("default", "team")
	to := map[string]string{"default": "team", "team": "default"}[from]
	key := types.NamespacedName{Namespace: to, Name: "from-" + from}
	if w.rnd.IntN(2) == 0 {
		delete(w.cs.ReferenceGrants, key)
		return "delete referencegrant " + key.String()
	}
	g := &gwapiv1.ReferenceGrant{
		ObjectMeta: metav1.ObjectMeta{Namespace: to, Name: key.Name},
		Spec: gwapiv1beta1.ReferenceGrantSpec{
			From: []gwapiv1beta1.ReferenceGrantFrom{{Group: gwapiv1.GroupName, Kind: "HTTPRoute", Namespace: gwapiv1.Namespace(from)}},
			To:   []gwapiv1beta1.ReferenceGrantTo{{Group: "", Kind: "Service"}},
		},
	}
	w.stamp(g)
	w.cs.ReferenceGrants[key] = g
	return "upsert referencegrant " + key.String()
}

// listenerSet creates, changes or deletes a ListenerSet of shared-a or by-class: one or two HTTP
// listeners whose hostnames, ports and names come and go, so that they attach, conflict with
// their Gateway's listeners and take routes, or not.
func (w *churn) listenerSet() string {
	key := w.key("ls", 3)
	if w.rnd.IntN(4) == 0 {
		delete(w.cs.ListenerSets, key)
		return "delete listenerset " + key.String()
	}
	ls := &gwapiv1.ListenerSet{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Generation: int64(w.rv)}}
	w.stamp(ls)
	ls.Spec.ParentRef = gwapiv1.ParentGatewayReference{Name: gwapiv1.ObjectName(w.pick("shared-a", "by-class")), Namespace: ptr.To(gwapiv1.Namespace("default"))}
	for i := range 1 + w.rnd.IntN(2) {
		l := gwapiv1.ListenerEntry{
			Name:     gwapiv1.SectionName(w.pick("extra", "http", fmt.Sprintf("l%d", i))),
			Port:     gwapiv1.PortNumber(w.pick2(80, 8080)),
			Protocol: gwapiv1.HTTPProtocolType,
		}
		if h := w.pick("", "a.example.com", "*.example.com", "ls.example.com"); h != "" {
			l.Hostname = ptr.To(gwapiv1.Hostname(h))
		}
		ls.Spec.Listeners = append(ls.Spec.Listeners, l)
	}
	w.cs.ListenerSets[key] = ls
	return "upsert listenerset " + key.String()
}

// grpcRoute creates, changes or deletes a GRPCRoute whose hostnames the HTTPRoutes also use, so
// that the kinds conflict on a listener and the older route wins it.
func (w *churn) grpcRoute() string {
	key := w.key("grpc", 2)
	if w.rnd.IntN(3) == 0 {
		delete(w.cs.GRPCRoutes, key)
		return "delete grpcroute " + key.String()
	}
	r := &gwapiv1.GRPCRoute{ObjectMeta: metav1.ObjectMeta{
		Namespace: key.Namespace, Name: key.Name, CreationTimestamp: metav1.Unix(int64(w.rnd.IntN(3)), 0),
	}}
	w.stamp(r)
	r.Spec.ParentRefs = []gwapiv1.ParentReference{{Name: gwapiv1.ObjectName(w.pick("shared-a", "shared-b")), Namespace: ptr.To(gwapiv1.Namespace("default"))}}
	r.Spec.Hostnames = []gwapiv1.Hostname{gwapiv1.Hostname(w.pick("a.example.com", "*.example.com"))}
	r.Spec.Rules = []gwapiv1.GRPCRouteRule{{BackendRefs: []gwapiv1.GRPCBackendRef{{BackendRef: gwapiv1.BackendRef{
		BackendObjectReference: gwapiv1.BackendObjectReference{Name: gwapiv1.ObjectName(fmt.Sprintf("svc-%d", w.rnd.IntN(4))), Port: ptr.To(gwapiv1.PortNumber(8080))},
	}}}}}
	w.cs.GRPCRoutes[key] = r
	return "upsert grpcroute " + key.String()
}

func (w *churn) pick2(a, b int32) int32 {
	if w.rnd.IntN(2) == 0 {
		return a
	}
	return b
}

// namespace turns a namespace's labels on or off: the ListenerSets shared-a admits and the
// routes by-class's listener takes.
func (w *churn) namespace() string {
	key := types.NamespacedName{Name: w.pick("default", "team")}
	ns := w.cs.Namespaces[key].DeepCopy()
	w.stamp(ns)
	label := w.pick("listeners", "routes")
	if ns.Labels[label] == "" {
		ns.Labels = map[string]string{label: "allowed"}
	} else {
		ns.Labels = nil
	}
	w.cs.Namespaces[key] = ns
	return fmt.Sprintf("label namespace %s %v", key.Name, ns.Labels)
}

// reload returns the state as Load returns it: the same objects, each behind a new pointer.
func reload(cs *state.ClusterState) *state.ClusterState {
	out := state.New()
	copyAll(out.GatewayClasses, cs.GatewayClasses)
	copyAll(out.Gateways, cs.Gateways)
	copyAll(out.HTTPRoutes, cs.HTTPRoutes)
	copyAll(out.ReferenceGrants, cs.ReferenceGrants)
	copyAll(out.BackendTLSPolicies, cs.BackendTLSPolicies)
	copyAll(out.ConfigMaps, cs.ConfigMaps)
	copyAll(out.Services, cs.Services)
	copyAll(out.EndpointSlices, cs.EndpointSlices)
	copyAll(out.Secrets, cs.Secrets)
	copyAll(out.Namespaces, cs.Namespaces)
	copyAll(out.ListenerSets, cs.ListenerSets)
	copyAll(out.GRPCRoutes, cs.GRPCRoutes)
	copyAll(out.GatewayParameters, cs.GatewayParameters)
	copyAll(out.Deployments, cs.Deployments)
	return out
}

func copyAll[T any](into, from map[types.NamespacedName]*T) {
	for k, v := range from {
		c := *v
		into[k] = &c
	}
}

// published returns every scope's version and resources, each marshalled deterministically.
func published(t *testing.T, c *cache.Cache) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for scope, snap := range c.Snapshots() {
		got := []string{snap.Version()}
		for _, r := range snap.Resources() {
			b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, string(b))
		}
		out[scope.String()] = got
	}
	return out
}

// Tests that after every event of random sequences (routes, Services, EndpointSlices, Secrets,
// Gateways, ReferenceGrants, ListenerSets and GRPCRoutes created, changed and deleted, namespaces
// labelled) the incremental pipeline publishes
// byte for byte what a pipeline built from nothing publishes for the same state, scope by scope
// and version by version, and computes the same status.
func TestIncrementalRebuildsEqualRebuildsFromScratch(t *testing.T) {
	t.Parallel()
	for seed := range uint64(16) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			w := newChurn(t, seed+1)
			incStatus := &statusRecorder{}
			inc := &Pipeline{Cache: cache.New(nil), Authority: scopeauth.New(), Status: incStatus, IsLeader: func() bool { return true }}
			var events []string
			for step := range 250 {
				events = append(events, w.step())
				if step%20 == 19 {
					// A burst of route edits in one rebuild: more routes marked than the compile
					// memo compares one by one.
					for range 14 {
						r := w.route()
						w.cs.HTTPRoutes[state.Key(r)] = r
						events = append(events, "upsert route "+state.Key(r).String())
					}
				}
				var cs *state.ClusterState
				if step%3 == 0 {
					cs = reload(w.cs) // every object behind a new pointer
				} else {
					// As Load gives it: the same object for what did not change, so that what is
					// kept by object (a cluster's endpoints) is reused between these steps.
					cs = w.cs
				}
				res, err := inc.Rebuild(context.Background(), Input{State: cs})
				if err != nil || len(res.Failed) > 0 {
					t.Fatalf("incremental rebuild after %v: %v %v", events, err, res.Failed)
				}
				scratchStatus := &statusRecorder{}
				scratch := &Pipeline{Cache: cache.New(nil), Authority: scopeauth.New(), Status: scratchStatus, IsLeader: func() bool { return true }}
				if _, err := scratch.Rebuild(context.Background(), Input{State: reload(w.cs)}); err != nil {
					t.Fatal(err)
				}
				got, want := published(t, inc.Cache), published(t, scratch.Cache)
				if len(got) != len(want) {
					t.Fatalf("after %v: scopes %d, want %d", events, len(got), len(want))
				}
				for scope, w := range want {
					if g := got[scope]; fmt.Sprint(g) != fmt.Sprint(w) {
						t.Fatalf("after %d events, the last %q: scope %s differs from the rebuild from scratch\ngot  %q\nwant %q", len(events), events[len(events)-1], scope, g, w)
					}
				}
				if !bytes.Equal(incStatus.last, scratchStatus.last) {
					t.Fatalf("after %v: status\ngot  %s\nwant %s", events, incStatus.last, scratchStatus.last)
				}
			}
		})
	}
}

// Tests that a scope whose compile panics keeps publishing its last snapshot while every other
// scope publishes its new one, that the rebuild reports the failure and counts it, and that the
// scope publishes again once it compiles.
func TestAFailingScopeLeavesTheOthersPublishing(t *testing.T) {
	t.Parallel()
	p, reg := measuredPipeline(t)
	web, shared := cache.Gateway("prod", "web"), cache.SharedPool()
	if _, err := p.Rebuild(context.Background(), input(t, world)); err != nil {
		t.Fatal(err)
	}
	before := map[cache.Scope]string{web: p.Cache.Get(web).Version(), shared: p.Cache.Get(shared).Version()}

	// Both Gateways get a second listener, so both scopes change.
	changed := strings.ReplaceAll(world, "protocol: HTTP}]", "protocol: HTTP}, {name: more, port: 81, protocol: HTTP}]")
	p.scopeHook = func(s cache.Scope) {
		if s == web {
			panic("compile bug")
		}
	}
	res, err := p.Rebuild(context.Background(), input(t, changed))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Failed) != 1 || res.Failed[0].Scope != web || !errors.Is(res.Failed[0].Err, ErrScopePanicked) {
		t.Fatalf("failures %v, want the web scope's panic", res.Failed)
	}
	if diff := cmp.Diff([]cache.Scope{shared}, res.Changed); diff != "" {
		t.Errorf("changed scopes (-want +got):\n%s", diff)
	}
	if len(res.Removed) != 0 || p.Cache.Get(web) == nil || p.Cache.Get(web).Version() != before[web] {
		t.Errorf("the failed scope lost its last snapshot: removed %v", res.Removed)
	}
	if p.Cache.Get(shared).Version() == before[shared] {
		t.Error("the shared pool did not publish its new version")
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	failures := map[string]float64{}
	for _, f := range families {
		if f.GetName() == "coxswain_rebuild_scope_failures_total" {
			for _, s := range f.GetMetric() {
				failures[s.GetLabel()[0].GetValue()] = s.GetCounter().GetValue()
			}
		}
	}
	if diff := cmp.Diff(map[string]float64{"gateway": 1}, failures); diff != "" {
		t.Errorf("failures counted (-want +got):\n%s", diff)
	}

	p.scopeHook = nil
	res, err = p.Rebuild(context.Background(), input(t, changed))
	if err != nil || len(res.Failed) != 0 {
		t.Fatalf("rebuild after the fix: %v, failures %v", err, res.Failed)
	}
	if diff := cmp.Diff([]cache.Scope{web}, res.Changed); diff != "" {
		t.Errorf("changed scopes once the scope compiles again (-want +got):\n%s", diff)
	}
}

// Tests that every kind of ClusterState is one the incremental diff can compare, so that a kind
// added later is compared (and its changes start every memo over) instead of making every
// rebuild start over, and that a change to a kind the diff knows nothing special about does
// start every memo over.
func TestEveryKindIsComparedByTheDiff(t *testing.T) {
	t.Parallel()
	v := reflect.TypeFor[state.ClusterState]()
	for i := range v.NumField() {
		if f := v.Field(i); !isObjectMap(f.Type) {
			t.Errorf("ClusterState.%s is not a map of objects by namespace/name", f.Name)
		}
	}
	cs := state.New()
	prev := seenOf(cs, graph.Options{})
	if c := prev.diff(cs, graph.Options{}); c.all || len(c.routes) != 0 || len(c.gateways) != 0 {
		t.Errorf("an unchanged state changed %+v", c)
	}
	cs.ConfigMaps[types.NamespacedName{Namespace: "a", Name: "b"}] = &corev1.ConfigMap{}
	if c := prev.diff(cs, graph.Options{}); !c.all {
		t.Error("a new ConfigMap did not start every memo over")
	}
}
