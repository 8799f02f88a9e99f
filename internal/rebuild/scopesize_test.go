package rebuild

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"iter"
	"maps"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/graph/conditions"
	"coxswain.dev/coxswain/internal/scopeauth"
)

// bigRouteWorld is a shared pool Gateway with listeners HTTP listeners (one hostname each, so a
// route without hostnames attaches to every one) and, in namespaces, one route each of about
// kib KiB of header values, created a second apart in the order given, the i-th named r<i>.
func bigRouteWorld(listeners, kib int, namespaces ...string) string {
	var b strings.Builder
	b.WriteString(`
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: coxswain}
spec: {controllerName: coxswain.dev/gateway-controller}
`)
	b.WriteString(sharedGateway("shared", listeners))
	for i, ns := range namespaces {
		b.WriteString(bigRoute(ns, fmt.Sprintf("r%d", i), "shared", i, kib/64))
	}
	return b.String()
}

// sharedGateway is a shared pool Gateway in namespace infra with listeners HTTP listeners on
// port 80, one hostname each, that allow routes from every namespace.
func sharedGateway(name string, listeners int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: %s, namespace: infra}
spec:
  gatewayClassName: coxswain
  listeners:
`, name)
	for i := range listeners {
		fmt.Fprintf(&b, "  - {name: l%d, port: 80, protocol: HTTP, hostname: %s-h%d.example.com, allowedRoutes: {namespaces: {from: All}}}\n", i, name, i)
	}
	return b.String()
}

// bigRoute is an HTTPRoute on Gateway infra/gateway created second seconds into 2026 with rules
// rules, each setting 16 headers of 4,000 bytes (64,000 bytes a rule).
func bigRoute(ns, name, gateway string, second, rules int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: %s, namespace: %s, creationTimestamp: "2026-01-01T00:00:%02dZ"}
spec:
  parentRefs: [{name: %s, namespace: infra}]
  rules:
`, name, ns, second, gateway)
	value := strings.Repeat("v", 4000)
	for range rules {
		b.WriteString("  - filters:\n    - type: RequestHeaderModifier\n      requestHeaderModifier:\n        set:\n")
		for h := range 16 {
			fmt.Fprintf(&b, "        - {name: x-h%d, value: %s}\n", h, value)
		}
	}
	return b.String()
}

// Tests that two routes of about 1 MiB on a shared Gateway with 64 listeners (a route is
// copied into the route set of every listener it attaches to) never make the shared pool's
// published snapshot larger than a stream may send.
func TestPipelineNeverPublishesASnapshotAboveTheMessageCap(t *testing.T) {
	t.Parallel()
	p := &Pipeline{Cache: cache.New(nil), Authority: scopeauth.New(), IsLeader: func() bool { return false }}
	if _, err := p.Rebuild(context.Background(), input(t, bigRouteWorld(64, 1024, "tenant-a", "tenant-b"))); err != nil {
		t.Fatal(err)
	}
	snap := p.Cache.Get(cache.SharedPool())
	if snap == nil {
		t.Fatal("no shared pool snapshot published")
	}
	if snap.EncodedSize() > discoveryv1.MaxServerMessageBytes {
		t.Fatalf("published a shared pool snapshot of %d bytes, above the %d a stream may send", snap.EncodedSize(), discoveryv1.MaxServerMessageBytes)
	}
}

// Tests that what the graph counts of each namespace's routes in each scope (every copy, with
// its route set) is never less than what the encoded snapshot holds of them: the graph's
// limits must hold on the bytes the streams send. Every graph golden input is tried, and a
// world of large routes on many listeners.
func TestGraphCountsNoLessThanTheSnapshotHoldsOfEachNamespace(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../graph/testdata/*.in.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no graph inputs: %v", err)
	}
	worlds := map[string]string{"large routes": bigRouteWorld(8, 128, "tenant-a", "tenant-b")}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		worlds[filepath.Base(f)] = string(b)
	}
	for name, world := range worlds {
		p := &Pipeline{Cache: cache.New(nil), Authority: scopeauth.New(), IsLeader: func() bool { return false }}
		var g *graph.Graph
		p.graphHook = func(built *graph.Graph) { g = built }
		res, err := p.Rebuild(context.Background(), input(t, world))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, scope := range res.Scopes {
			counted := g.RouteBytes()[graphScope(scope)]
			for ns, held := range namespaceBytes(t, p.Cache.Get(scope)) {
				if held > counted[ns] {
					t.Errorf("%s: %s holds %d bytes of namespace %s's routes, the graph counted %d", name, scope, held, ns, counted[ns])
				}
			}
		}
	}
}

func graphScope(s cache.Scope) types.NamespacedName {
	if s.Kind == cache.KindGateway {
		return types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
	}
	return types.NamespacedName{}
}

// routeSets yields every route set resource of snap with its decoded RouteSet.
func routeSets(t *testing.T, snap *cache.Snapshot) iter.Seq2[*discoveryv1.Resource, *discoveryv1.RouteSet] {
	t.Helper()
	return func(yield func(*discoveryv1.Resource, *discoveryv1.RouteSet) bool) {
		for _, r := range snap.Resources() {
			if !strings.HasPrefix(r.GetKey(), discoveryv1.RouteSetKeyPrefix) {
				continue
			}
			set := &discoveryv1.RouteSet{}
			if err := r.GetPayload().UnmarshalTo(set); err != nil {
				t.Fatal(err)
			}
			if !yield(r, set) {
				return
			}
		}
	}
}

// namespaceBytes returns, for every namespace with routes in snap, the bytes its routes take of
// the full snapshot's encoding: each of its routes, and the whole of every route set holding
// one of them but its other routes.
func namespaceBytes(t *testing.T, snap *cache.Snapshot) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for r, set := range routeSets(t, snap) {
		// The resource as a field of the snapshot: its tag and length with it.
		whole := int64(protowire.SizeTag(1) + protowire.SizeBytes(proto.Size(r)))
		routes := map[string]int64{}
		var all int64
		for _, route := range set.GetRoutes() {
			id := route.GetName()
			if _, rest, ok := strings.Cut(id, ":"); ok {
				id = rest
			}
			ns, _, _ := strings.Cut(id, "/")
			n := int64(protowire.SizeTag(1) + protowire.SizeBytes(proto.Size(route)))
			routes[ns] += n
			all += n
		}
		for ns, n := range routes {
			out[ns] += n + whole - all
		}
	}
	return out
}

// sizeRefused returns, for every route of g, whether a parent of it is refused with
// SnapshotSizeLimitReached, and the message of the last one.
func sizeRefused(t *testing.T, g *graph.Graph) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, r := range g.HTTPRoutes {
		for _, p := range r.Parents {
			if c := conditions.Find(p.Conditions, string(gwapiv1.RouteConditionAccepted)); c != nil && c.Reason == conditions.ReasonSnapshotSizeLimitReached {
				if p.Accepted || c.Status != metav1.ConditionFalse {
					t.Fatalf("route %s: parent accepted %v with %+v", r.Key(), p.Accepted, c)
				}
				out[r.Key().String()] = c.Message
			}
		}
	}
	return out
}

// routesServed returns the routes (namespace/name) the route sets of snap hold.
func routesServed(t *testing.T, snap *cache.Snapshot) []string {
	t.Helper()
	seen := map[string]bool{}
	for _, set := range routeSets(t, snap) {
		for _, route := range set.GetRoutes() {
			parts := strings.SplitN(route.GetName(), "/", 3)
			seen[parts[0]+"/"+parts[1]] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// Tests that the routes of one namespace take at most their share of a scope's snapshot, every
// copy counted: its older routes are served, the one beyond the share is not accepted with
// SnapshotSizeLimitReached and leaves the listeners' attached routes, other namespaces are not
// affected, and the refused route is served again once an older one leaves room.
func TestRoutesOfANamespaceTakeAtMostTheirShareOfAScope(t *testing.T) {
	t.Parallel()
	p := &Pipeline{Cache: cache.New(nil), Authority: scopeauth.New(), IsLeader: func() bool { return false }}
	var g *graph.Graph
	p.graphHook = func(built *graph.Graph) { g = built }
	// Each route takes about 4.1 MB of the snapshot (64 copies of 64 kB): two fit in a
	// namespace's 8 MiB, not three.
	in := input(t, bigRouteWorld(64, 64, "tenant-a", "tenant-a", "tenant-a", "tenant-b"))
	if _, err := p.Rebuild(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	refused := sizeRefused(t, g)
	if _, ok := refused["tenant-a/r2"]; !ok || len(refused) != 1 {
		t.Fatalf("routes refused for size: %v, want tenant-a/r2 only", refused)
	}
	if msg := refused["tenant-a/r2"]; !strings.Contains(msg, "namespace tenant-a") || !strings.Contains(msg, "the shared pool") {
		t.Errorf("refusal message %q does not say which namespace and scope", msg)
	}
	for _, l := range g.Gateways[0].Listeners {
		if l.AttachedRoutes() != 3 {
			t.Fatalf("listener %s has %d attached routes, want 3", l.Name, l.AttachedRoutes())
		}
	}
	want := []string{"tenant-a/r0", "tenant-a/r1", "tenant-b/r3"}
	if diff := cmp.Diff(want, routesServed(t, p.Cache.Get(cache.SharedPool()))); diff != "" {
		t.Fatalf("routes served (-want +got):\n%s", diff)
	}

	// The oldest route goes: the refused one fits, and the incremental rebuild serves it.
	delete(in.State.HTTPRoutes, types.NamespacedName{Namespace: "tenant-a", Name: "r0"})
	if _, err := p.Rebuild(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	if refused := sizeRefused(t, g); len(refused) != 0 {
		t.Fatalf("routes still refused for size: %v", refused)
	}
	want = []string{"tenant-a/r1", "tenant-a/r2", "tenant-b/r3"}
	if diff := cmp.Diff(want, routesServed(t, p.Cache.Get(cache.SharedPool()))); diff != "" {
		t.Fatalf("routes served once room was made (-want +got):\n%s", diff)
	}
}

// Tests that the routes of every namespace together take at most what one snapshot may hold of
// routes: many tenants within their shares cannot make the shared pool's snapshot unsendable
// either; the newest route is the one refused.
func TestRoutesOfAllNamespacesTakeAtMostWhatAScopeHolds(t *testing.T) {
	t.Parallel()
	p := &Pipeline{Cache: cache.New(nil), Authority: scopeauth.New(), IsLeader: func() bool { return false }}
	var g *graph.Graph
	p.graphHook = func(built *graph.Graph) { g = built }
	var namespaces []string
	for i := range 13 { // 13 routes of 4.1 MB: 12 fit in 48 MiB
		namespaces = append(namespaces, fmt.Sprintf("tenant-%02d", i))
	}
	if _, err := p.Rebuild(context.Background(), input(t, bigRouteWorld(64, 64, namespaces...))); err != nil {
		t.Fatal(err)
	}
	refused := sizeRefused(t, g)
	msg, ok := refused["tenant-12/r12"]
	if !ok || len(refused) != 1 {
		t.Fatalf("routes refused for size: %v, want tenant-12/r12 only", refused)
	}
	if !strings.Contains(msg, "one snapshot may hold") {
		t.Errorf("refusal message %q does not say the scope is full", msg)
	}
	if got := len(routesServed(t, p.Cache.Get(cache.SharedPool()))); got != 12 {
		t.Errorf("%d routes served, want 12", got)
	}
	if size := p.Cache.Get(cache.SharedPool()).EncodedSize(); size > discoveryv1.MaxSnapshotBytes {
		t.Errorf("published a snapshot of %d bytes", size)
	}
}

// certWorld is a shared pool Gateway with listeners HTTPS listeners, each with a certificate
// Secret of its own whose chain carries padding bytes after a valid leaf.
func certWorld(t *testing.T, listeners, padding int) Input {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), DNSNames: []string{"*.example.com"}, NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	chain := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: make([]byte, padding)})...)
	pk := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	var b strings.Builder
	b.WriteString(`
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: coxswain}
spec: {controllerName: coxswain.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: shared, namespace: infra}
spec:
  gatewayClassName: coxswain
  listeners:
`)
	for i := range listeners {
		fmt.Fprintf(&b, "  - {name: l%d, port: 443, protocol: HTTPS, hostname: h%d.example.com, tls: {certificateRefs: [{name: c%d}]}}\n", i, i, i)
	}
	in := input(t, b.String())
	for i := range listeners {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: fmt.Sprintf("c%d", i)},
			Type:       corev1.SecretTypeTLS,
			Data:       map[string][]byte{corev1.TLSCertKey: chain, corev1.TLSPrivateKeyKey: pk},
		}
		in.State.Secrets[types.NamespacedName{Namespace: s.Namespace, Name: s.Name}] = s
	}
	return in
}

// Tests that a scope whose snapshot would be larger than a stream may send, whatever makes it
// so (here 70 certificates of 1 MB), keeps the last snapshot it published, fails with
// ErrSnapshotTooLarge, and is measured: its size above the limit, and the snapshot counted as
// too large.
func TestAScopeTooLargeToSendKeepsItsLastSnapshot(t *testing.T) {
	t.Parallel()
	p, reg := measuredPipeline(t)
	if _, err := p.Rebuild(context.Background(), certWorld(t, 70, 1000)); err != nil {
		t.Fatal(err)
	}
	good := p.Cache.Get(cache.SharedPool())
	if good == nil {
		t.Fatal("no shared pool snapshot published")
	}
	res, err := p.Rebuild(context.Background(), certWorld(t, 70, 1_000_000))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Failed) != 1 || !errors.Is(res.Failed[0].Err, ErrSnapshotTooLarge) || res.Failed[0].Scope != cache.SharedPool() {
		t.Fatalf("failed scopes %+v, want the shared pool with ErrSnapshotTooLarge", res.Failed)
	}
	if got := p.Cache.Get(cache.SharedPool()); got.Version() != good.Version() {
		t.Fatalf("the shared pool publishes version %s of %d bytes, want its last good %s", got.Version(), got.EncodedSize(), good.Version())
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var size, limit, tooLarge float64
	for _, f := range families {
		switch f.GetName() {
		case "coxswain_rebuild_scope_snapshot_bytes":
			size = f.GetMetric()[0].GetGauge().GetValue()
		case "coxswain_rebuild_snapshot_limit_bytes":
			limit = f.GetMetric()[0].GetGauge().GetValue()
		case "coxswain_rebuild_snapshots_too_large_total":
			tooLarge = f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if tooLarge != 1 {
		t.Errorf("snapshots too large counted %v, want 1", tooLarge)
	}
	if limit != discoveryv1.MaxSnapshotBytes || size <= limit {
		t.Errorf("scope snapshot measured %v bytes against a limit of %v, want above %d", size, limit, discoveryv1.MaxSnapshotBytes)
	}
}

// Tests that an incremental rebuild serves what the size limits decide when a change elsewhere
// in the scope swaps the routes of a listener: a large route on another Gateway shrinks, so an
// older route refused before fits and pushes a newer one out, on listeners where no route
// changed and as many routes attach as before.
func TestAChangeElsewhereInTheScopeSwapsTheRoutesItRefuses(t *testing.T) {
	t.Parallel()
	p := &Pipeline{Cache: cache.New(nil), Authority: scopeauth.New(), IsLeader: func() bool { return false }}
	p.Graph.MaxRouteBytesPerNamespace = 1 << 40 // only the scope's limit applies
	world := func(xRules int) Input {
		var b strings.Builder
		b.WriteString(`
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: coxswain}
spec: {controllerName: coxswain.dev/gateway-controller}
`)
		b.WriteString(sharedGateway("one", 64))
		b.WriteString(sharedGateway("two", 64))
		// 64 copies of a rule take about 4.1 MB; the scope's routes may take 50.3 MB.
		b.WriteString(bigRoute("tenant-x", "x", "two", 0, xRules))
		b.WriteString(bigRoute("tenant-a", "a", "one", 1, 5))
		b.WriteString(bigRoute("tenant-b", "b", "one", 2, 1))
		return input(t, b.String())
	}
	// x takes 41 MB: a (20.5 MB) does not fit, b (4.1 MB) does.
	if _, err := p.Rebuild(context.Background(), world(10)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"tenant-b/b", "tenant-x/x"}, routesServed(t, p.Cache.Get(cache.SharedPool()))); diff != "" {
		t.Fatalf("routes served (-want +got):\n%s", diff)
	}
	// x shrinks to 28.7 MB: a fits, and b no longer does.
	if _, err := p.Rebuild(context.Background(), world(7)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"tenant-a/a", "tenant-x/x"}, routesServed(t, p.Cache.Get(cache.SharedPool()))); diff != "" {
		t.Fatalf("routes served after x shrank (-want +got):\n%s", diff)
	}
}

// Tests that the namespace's share the pipeline is given at each rebuild (the CoxswainConfig's
// snapshots.maxRouteBytesPerNamespace) is the one the graph applies.
func TestPipelineTakesTheNamespaceShareFromItsSettings(t *testing.T) {
	t.Parallel()
	share := int64(8 << 20)
	p := &Pipeline{
		Cache: cache.New(nil), Authority: scopeauth.New(), IsLeader: func() bool { return false },
		MaxRouteBytesPerNamespace: func() int64 { return share },
	}
	var g *graph.Graph
	p.graphHook = func(built *graph.Graph) { g = built }
	in := input(t, bigRouteWorld(2, 64, "tenant-a")) // about 130 kB counted
	if _, err := p.Rebuild(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	if refused := sizeRefused(t, g); len(refused) != 0 {
		t.Fatalf("refused %v under an 8 MiB share", refused)
	}
	share = 64 << 10
	if _, err := p.Rebuild(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	if _, ok := sizeRefused(t, g)["tenant-a/r0"]; !ok {
		t.Fatal("the route is served beyond a 64 KiB share")
	}
	if got := routesServed(t, p.Cache.Get(cache.SharedPool())); len(got) != 0 {
		t.Errorf("routes served %v, want none", got)
	}
}
