package rebuild

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/encode"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/scopeauth"
	"coxswain.dev/coxswain/internal/snapshot"
	"coxswain.dev/coxswain/internal/state"
	"coxswain.dev/coxswain/internal/status"
)

// cpuTime returns the CPU time the process has used, user and system, on every thread.
func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		b.Fatal(err)
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// reportCPU reports the process's CPU time per iteration since before, garbage collection
// included: on a loaded machine, where wall-clock time per op counts the waits for a core too,
// it is the figure that says what an op costs.
func reportCPU(b *testing.B, before time.Duration) {
	b.Helper()
	b.ReportMetric(float64(cpuTime(b)-before)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
}

// newBenchPipeline returns a follower's pipeline (no status writes) that has published cs once.
func newBenchPipeline(b *testing.B, cs *state.ClusterState) *Pipeline {
	b.Helper()
	p := &Pipeline{Cache: cache.New(nil), Authority: scopeauth.New(), IsLeader: func() bool { return false }}
	res, err := p.Rebuild(context.Background(), Input{State: cs})
	if err != nil {
		b.Fatal(err)
	}
	if len(res.Changed) == 0 {
		b.Fatal("the first rebuild published nothing")
	}
	return p
}

// routeEdit is a cluster of routes and two specs of one of its routes.
type routeEdit struct {
	cs     *state.ClusterState
	key    types.NamespacedName
	states [2]*gwapiv1.HTTPRoute
}

func newRouteEdit(routes int) *routeEdit {
	cs := scaleState(routes)
	key := types.NamespacedName{Namespace: "ns-0", Name: "route-0"}
	return &routeEdit{cs: cs, key: key, states: [2]*gwapiv1.HTTPRoute{cs.HTTPRoutes[key], editRoute(cs, key)}}
}

// flip puts the i-th spec of the route in the cluster, alternating between the two.
func (e *routeEdit) flip(i int) { e.cs.HTTPRoutes[e.key] = e.states[(i+1)%2] }

// benchRouteEdit runs e's edits through a follower's pipeline; with scratch, its memos are
// dropped before every edit.
func benchRouteEdit(b *testing.B, e *routeEdit, scratch bool) {
	b.Helper()
	p := newBenchPipeline(b, e.cs)
	b.ReportAllocs()
	i := 0
	before := cpuTime(b)
	for b.Loop() {
		e.flip(i)
		i++
		if scratch {
			p.inc = incremental{}
		}
		res, err := p.Rebuild(context.Background(), Input{State: e.cs})
		if err != nil || len(res.Changed) != 1 {
			b.Fatalf("rebuild changed %v, error %v; want the shared pool", res.Changed, err)
		}
	}
	reportCPU(b, before)
}

// newOneListenerEdit is newRouteEdit with every route on the listener of gw-0 and a hostname of
// its own.
func newOneListenerEdit(routes int) *routeEdit {
	cs := scaleState(routes)
	for key, r := range cs.HTTPRoutes {
		r = r.DeepCopy()
		r.Spec.ParentRefs[0].Name = "gw-0"
		r.Spec.Hostnames = []gwapiv1.Hostname{gwapiv1.Hostname(r.Name + ".example.com")}
		cs.HTTPRoutes[key] = r
	}
	key := types.NamespacedName{Namespace: "ns-0", Name: "route-0"}
	return &routeEdit{cs: cs, key: key, states: [2]*gwapiv1.HTTPRoute{cs.HTTPRoutes[key], editRoute(cs, key)}}
}

// BenchmarkRouteEdit measures the controller's cost of one HTTPRoute edit among 5,000 routes
// (scaleState): "rebuild" is what an edit costs, the whole pipeline as it runs (graph, then the
// incremental compile and encode of what the edit can affect, scope authority, publish to the
// discovery cache); "rebuild-from-scratch" is the same pipeline with its memos dropped before
// every edit, what an edit cost before rebuilds were incremental; the others are the stages
// alone, from scratch. Every iteration swaps the route between two specs, so that every one
// publishes a new shared pool version. Reading the informer cache (Load) and status writes are
// not included.
func BenchmarkRouteEdit(b *testing.B) {
	const routes = 5000
	for _, scratch := range []bool{false, true} {
		name := "rebuild"
		if scratch {
			name = "rebuild-from-scratch"
		}
		b.Run(fmt.Sprintf("routes=%d/%s", routes, name), func(b *testing.B) {
			benchRouteEdit(b, newRouteEdit(routes), scratch)
		})
	}
	// The shape of the propagation benchmark (test/e2e): every route on one listener, each with
	// a hostname of its own, so the listener's resource holds 3,000 virtual hosts.
	b.Run("routes=3000/one-listener/rebuild", func(b *testing.B) {
		benchRouteEdit(b, newOneListenerEdit(3000), false)
	})
	b.Run(fmt.Sprintf("routes=%d/graph", routes), func(b *testing.B) {
		e := newRouteEdit(routes)
		b.ReportAllocs()
		i := 0
		before := cpuTime(b)
		for b.Loop() {
			e.flip(i)
			i++
			graph.Build(e.cs, graph.Options{})
		}
		reportCPU(b, before)
	})
	b.Run(fmt.Sprintf("routes=%d/compile", routes), func(b *testing.B) {
		g := graph.Build(newRouteEdit(routes).cs, graph.Options{})
		b.ReportAllocs()
		before := cpuTime(b)
		for b.Loop() {
			snapshot.Compile(g)
		}
		reportCPU(b, before)
	})
	b.Run(fmt.Sprintf("routes=%d/encode", routes), func(b *testing.B) {
		snaps := snapshot.Compile(graph.Build(newRouteEdit(routes).cs, graph.Options{}))
		b.ReportAllocs()
		before := cpuTime(b)
		for b.Loop() {
			if _, err := encode.All(snaps); err != nil {
				b.Fatal(err)
			}
		}
		reportCPU(b, before)
	})
	b.Run(fmt.Sprintf("routes=%d/publish", routes), func(b *testing.B) {
		e := newRouteEdit(routes)
		var encoded [2][]scopeEncoding
		for i := range encoded {
			e.flip(i)
			all, err := encode.All(snapshot.Compile(graph.Build(e.cs, graph.Options{})))
			if err != nil {
				b.Fatal(err)
			}
			for _, enc := range all {
				encoded[i] = append(encoded[i], scopeEncoding{Encoded: enc})
			}
		}
		p := &Pipeline{Cache: cache.New(nil), Authority: scopeauth.New(), IsLeader: func() bool { return false }}
		b.ReportAllocs()
		i := 0
		before := cpuTime(b)
		for b.Loop() {
			if _, err := p.publish(context.Background(), encoded[i%2], nil, time.Time{}); err != nil {
				b.Fatal(err)
			}
			i++
		}
		reportCPU(b, before)
	})
}

// BenchmarkFullRebuild measures a rebuild from nothing, as at the controller's start: graph,
// compile, encode and publish of every scope into an empty discovery cache.
func BenchmarkFullRebuild(b *testing.B) {
	for _, routes := range []int{1000, 5000} {
		cs := scaleState(routes)
		b.Run(fmt.Sprintf("routes=%d", routes), func(b *testing.B) {
			b.ReportAllocs()
			before := cpuTime(b)
			for b.Loop() {
				p := &Pipeline{Cache: cache.New(nil), Authority: scopeauth.New(), IsLeader: func() bool { return false }}
				if _, err := p.Rebuild(context.Background(), Input{State: cs}); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, before)
		})
	}
}

// BenchmarkEndpointsChange measures the controller's cost of one EndpointSlice change among
// 5,000 routes (scaleState): one endpoint of svc-0 comes and goes, so every iteration publishes
// a new shared pool version in which only that cluster's resource changed.
func BenchmarkEndpointsChange(b *testing.B) {
	const routes = 5000
	cs := scaleState(routes)
	key := types.NamespacedName{Namespace: "ns-0", Name: "svc-0-1"}
	fewer := cs.EndpointSlices[key].DeepCopy()
	fewer.Endpoints = fewer.Endpoints[:2]
	states := [2]*discoveryv1.EndpointSlice{cs.EndpointSlices[key], fewer}
	p := newBenchPipeline(b, cs)
	b.ReportAllocs()
	i := 0
	before := cpuTime(b)
	for b.Loop() {
		i++
		cs.EndpointSlices[key] = states[i%2]
		res, err := p.Rebuild(context.Background(), Input{State: cs})
		if err != nil || len(res.Changed) != 1 {
			b.Fatalf("rebuild changed %v, error %v; want the shared pool", res.Changed, err)
		}
	}
	reportCPU(b, before)
}

// acceptingClient is an API client whose status writes all succeed and go nowhere: what the
// status pass costs the controller, not the API server, is measured. Its other methods are not
// there.
type acceptingClient struct{ client.Client }

func (acceptingClient) Status() client.SubResourceWriter { return acceptingStatus{} }

// acceptingStatus is acceptingClient's status writer.
type acceptingStatus struct{}

func (acceptingStatus) Create(context.Context, client.Object, client.Object, ...client.SubResourceCreateOption) error {
	return nil
}

func (acceptingStatus) Update(context.Context, client.Object, ...client.SubResourceUpdateOption) error {
	return nil
}

func (acceptingStatus) Patch(context.Context, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
	return nil
}

func (acceptingStatus) Apply(context.Context, runtime.ApplyConfiguration, ...client.SubResourceApplyOption) error {
	return nil
}

// BenchmarkStatusPass measures the leader's status pass among 5,000 routes (scaleState) when a
// proxy's answer is all that changed: the proxies of the shared pool alternate between having
// applied the Gateways' generation and not, so every pass finds the Gateways' Programmed changed
// (and writes them to an API client that accepts everything), the routes unchanged. "whole" is
// the pass over the whole graph that every answer cost before (Write); "answered-scope" judges
// only the scope that answered (WriteApplied), as the status loop does now.
func BenchmarkStatusPass(b *testing.B) {
	const routes = 5000
	cs := scaleState(routes)
	for _, gw := range graph.Build(cs, graph.Options{}).Gateways {
		// A shared pool Service with an address each, so that Programmed rests on the proxies' answers.
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: wellknown.InstallNamespace, Name: gw.SharedService,
				Annotations: map[string]string{graph.SharedServiceGatewayAnnotation: gw.Key().String()},
			},
			Spec:   corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.1"}}}},
		}
		cs.Services[state.Key(svc)] = svc
	}
	g := graph.Build(cs, graph.Options{})
	for _, whole := range []bool{true, false} {
		name := "answered-scope"
		if whole {
			name = "whole"
		}
		b.Run(fmt.Sprintf("routes=%d/%s", routes, name), func(b *testing.B) {
			applied := status.Applied{State: status.AppliedYes}
			w := &status.Writer{Client: acceptingClient{}, Applied: func(cache.Scope, types.NamespacedName, types.UID, int64) status.Applied {
				return applied
			}}
			ctx := context.Background()
			if _, err := w.Write(ctx, cs, g); err != nil {
				b.Fatal(err)
			}
			scopes := []cache.Scope{cache.SharedPool()}
			b.ReportAllocs()
			i := 0
			before := cpuTime(b)
			for b.Loop() {
				i++
				applied = status.Applied{State: status.AppliedYes}
				if i%2 == 1 {
					applied = status.Applied{State: status.AppliedPending, Message: "Waiting for the proxies"}
				}
				var n int
				var err error
				if whole {
					n, err = w.Write(ctx, cs, g)
				} else {
					n, err = w.WriteApplied(ctx, cs, g, scopes)
				}
				if err != nil || n == 0 {
					b.Fatalf("status pass wrote %d objects, error %v; want the Gateways", n, err)
				}
			}
			reportCPU(b, before)
		})
	}
}
