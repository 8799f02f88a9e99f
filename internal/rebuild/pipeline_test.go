package rebuild

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/stream"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/identity/trustbundle"
	"coxswain.dev/coxswain/internal/scopeauth"
	"coxswain.dev/coxswain/internal/state"
)

const world = `
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: coxswain}
spec: {controllerName: coxswain.dev/gateway-controller}
---
apiVersion: gateway.coxswain.dev/v1alpha1
kind: CoxswainGatewayParameters
metadata: {name: own, namespace: prod}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: shared, namespace: prod}
spec:
  gatewayClassName: coxswain
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: web, namespace: prod}
spec:
  gatewayClassName: coxswain
  infrastructure: {parametersRef: {group: gateway.coxswain.dev, kind: CoxswainGatewayParameters, name: own}}
  listeners: [{name: http, port: 8080, protocol: HTTP}]
`

func input(t *testing.T, yaml string) Input {
	t.Helper()
	cs, err := state.Decode(strings.NewReader(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return Input{State: cs}
}

type countingWriter struct{ calls int }

func (w *countingWriter) Write(context.Context, *state.ClusterState, *graph.Graph) (int, error) {
	w.calls++
	return 0, nil
}

func TestPipelinePublishesScopesAndAnswersForThem(t *testing.T) {
	t.Parallel()
	leader := false
	writer := &countingWriter{}
	p := &Pipeline{Cache: cache.New(nil), Authority: scopeauth.New(), Status: writer, IsLeader: func() bool { return leader }}
	web := cache.Gateway("prod", "web")

	changedAt := time.Unix(1000, 0)
	in := input(t, world)
	in.ChangedAt = changedAt
	res, err := p.Rebuild(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	want := []cache.Scope{web, cache.SharedPool()}
	if diff := cmp.Diff(want, res.Scopes); diff != "" {
		t.Fatalf("scopes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, res.Changed); diff != "" {
		t.Fatalf("changed (-want +got):\n%s", diff)
	}
	if writer.calls != 0 {
		t.Fatal("a follower wrote status")
	}
	for _, s := range want {
		if got := p.Cache.Get(s).ChangedAt(); !got.Equal(changedAt) {
			t.Errorf("%s was published changed at %v, want the rebuild's change time %v", s, got, changedAt)
		}
	}
	keys := func(s cache.Scope) []string {
		var out []string
		for _, r := range p.Cache.Get(s).Resources() {
			out = append(out, r.GetKey())
		}
		return out
	}
	if diff := cmp.Diff([]string{"listener/prod/web/8080"}, keys(web)); diff != "" {
		t.Errorf("dedicated scope keys (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"listener/prod/shared/80"}, keys(cache.SharedPool())); diff != "" {
		t.Errorf("shared pool keys (-want +got):\n%s", diff)
	}
	if sa, err := p.Authority.ExpectedServiceAccount("prod", "web"); err != nil || sa != "web-coxswain" {
		t.Errorf("authority answers %q, %v", sa, err)
	}

	leader = true
	res, err = p.Rebuild(context.Background(), input(t, world))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Changed) != 0 || res.AuthorityChanged {
		t.Errorf("an unchanged world changed %v, authority changed %v", res.Changed, res.AuthorityChanged)
	}
	if writer.calls != 1 {
		t.Errorf("the leader wrote status %d times, want 1", writer.calls)
	}

	withoutWeb, _, _ := strings.Cut(world, "---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: web")
	res, err = p.Rebuild(context.Background(), input(t, withoutWeb))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]cache.Scope{web}, res.Removed); diff != "" || !res.AuthorityChanged {
		t.Errorf("removed (-want +got):\n%s\nauthority changed %v", diff, res.AuthorityChanged)
	}
	if p.Cache.Get(web) != nil {
		t.Error("the vanished scope is still in the cache")
	}
	if _, err := p.Authority.ExpectedServiceAccount("prod", "web"); !errors.Is(err, stream.ErrUnknownGateway) {
		t.Errorf("the deleted Gateway still answers: %v", err)
	}
}

type recordingCopier struct{ calls [][]trustbundle.Target }

func (c *recordingCopier) Sync(_ context.Context, targets []trustbundle.Target) error {
	c.calls = append(c.calls, targets)
	return nil
}

func TestPipelineCopiesTheTrustBundleToDedicatedNamespacesOnTheLeader(t *testing.T) {
	t.Parallel()
	leader := false
	copier := &recordingCopier{}
	p := &Pipeline{Cache: cache.New(nil), Authority: scopeauth.New(), TrustCopies: copier, IsLeader: func() bool { return leader }}
	withUID := strings.Replace(world, "metadata: {name: web, namespace: prod}", "metadata: {name: web, namespace: prod, uid: web-uid}", 1)

	if _, err := p.Rebuild(context.Background(), input(t, withUID)); err != nil {
		t.Fatal(err)
	}
	if len(copier.calls) != 0 {
		t.Fatal("a follower copied the trust bundle")
	}
	leader = true
	for range 2 {
		if _, err := p.Rebuild(context.Background(), input(t, withUID)); err != nil {
			t.Fatal(err)
		}
	}
	want := [][]trustbundle.Target{{{Namespace: "prod", Owner: metav1.OwnerReference{
		APIVersion: "gateway.networking.k8s.io/v1", Kind: "Gateway", Name: "web", UID: "web-uid", BlockOwnerDeletion: ptr.To(false),
	}}}}
	if diff := cmp.Diff(want, copier.calls); diff != "" {
		t.Fatalf("the leader copies once per change of the dedicated namespaces (-want +got):\n%s", diff)
	}

	withoutWeb, _, _ := strings.Cut(withUID, "---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: web")
	if _, err := p.Rebuild(context.Background(), input(t, withoutWeb)); err != nil {
		t.Fatal(err)
	}
	if got := copier.calls[len(copier.calls)-1]; len(copier.calls) != 2 || len(got) != 0 {
		t.Errorf("after the dedicated Gateway went, the copier was told %v in call %d; want no targets in call 2", got, len(copier.calls))
	}
}

// Tests that a rebuild revokes before it publishes: when the authority's hooks run (the stream
// server's Reauthorize), the cache still holds the content the revoked proxy was allowed to see.
func TestPipelineRevokesBeforeItPublishes(t *testing.T) {
	t.Parallel()
	p := &Pipeline{Cache: cache.New(nil), Authority: scopeauth.New(), IsLeader: func() bool { return false }}
	web := cache.Gateway("prod", "web")
	twoClasses := world + `---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: other}
spec: {controllerName: coxswain.dev/gateway-controller}
`
	if _, err := p.Rebuild(context.Background(), input(t, twoClasses)); err != nil {
		t.Fatal(err)
	}
	before := p.Cache.Get(web).Version()
	var seen []string
	p.Authority.OnChange(func() { seen = append(seen, p.Cache.Get(web).Version()) })

	moved := strings.Replace(twoClasses, "gatewayClassName: coxswain\n  infrastructure", "gatewayClassName: other\n  infrastructure", 1)
	moved = strings.Replace(moved, "port: 8080", "port: 9090", 1)
	res, err := p.Rebuild(context.Background(), input(t, moved))
	if err != nil {
		t.Fatal(err)
	}
	if !res.AuthorityChanged || p.Cache.Get(web).Version() == before {
		t.Fatalf("the rebuild changed authority %v, version %s -> %s; want both changed",
			res.AuthorityChanged, before, p.Cache.Get(web).Version())
	}
	if diff := cmp.Diff([]string{before}, seen); diff != "" {
		t.Errorf("versions in the cache when revocation ran (-want +got):\n%s", diff)
	}
	if sa, _ := p.Authority.ExpectedServiceAccount("prod", "web"); sa != "web-other" {
		t.Errorf("authority answers %q, want web-other", sa)
	}
}

// Tests that the EndpointSlice trust is read at every rebuild: switching it republishes the
// scope whose backend has a hand-written slice, with the same cluster state.
func TestPipelineRereadsEndpointSliceTrust(t *testing.T) {
	t.Parallel()
	in := input(t, world+`
---
apiVersion: v1
kind: Service
metadata: {name: external, namespace: prod}
spec:
  ports: [{name: http, port: 80}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: external-1, namespace: prod, labels: {kubernetes.io/service-name: external}}
addressType: IPv4
ports: [{name: http, port: 80}]
endpoints: [{addresses: ["10.5.0.1"]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: app, namespace: prod}
spec:
  parentRefs: [{name: shared}]
  rules: [{backendRefs: [{name: external, port: 80}]}]
`)
	trustAny := false
	p := &Pipeline{
		Cache: cache.New(nil), Authority: scopeauth.New(), IsLeader: func() bool { return false },
		TrustAnyEndpointSlice: func() bool { return trustAny },
	}
	for i, want := range []bool{false, true, false} {
		trustAny = want
		res, err := p.Rebuild(t.Context(), in)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(res.Changed, cache.SharedPool()) {
			t.Fatalf("rebuild %d with TrustAnyEndpointSlice=%v did not republish the shared pool: %v", i, want, res.Changed)
		}
		if got := servesAddress(t, p.Cache.Get(cache.SharedPool()), "10.5.0.1"); got != want {
			t.Errorf("rebuild %d with TrustAnyEndpointSlice=%v: the hand-written endpoint served = %v", i, want, got)
		}
	}
}

// servesAddress reports whether a resource of snap holds addr.
func servesAddress(t *testing.T, snap *cache.Snapshot, addr string) bool {
	t.Helper()
	for _, r := range snap.Resources() {
		b, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(addr)) {
			return true
		}
	}
	return false
}
