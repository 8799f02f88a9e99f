package rebuild

import (
	"bytes"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/snapshot"
	"coxswain.dev/coxswain/internal/state"
	"coxswain.dev/coxswain/internal/state/statetest"
)

// output is everything a rebuild produces from a state: statuses and snapshots.
func output(t *testing.T, cs *state.ClusterState) []byte {
	t.Helper()
	g := graph.Build(cs, graph.Options{})
	out, err := yaml.Marshal(struct {
		Status    graph.Status
		Snapshots []*snapshot.Snapshot
	}{g.Status(), snapshot.Compile(g)})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Tests that References are sound over every graph golden case: removing any Service,
// EndpointSlice or Secret that does not matter, or adding new ones, leaves the statuses and
// snapshots byte for byte as they were; and that every object the filter drops would indeed
// have been dropped (the test fails if a case has nothing unreferenced to remove, so it cannot
// pass vacuously overall).
func TestReferencesNeverHideAChangeThatMatters(t *testing.T) {
	removed := 0
	inputs := statetest.GoldenInputs(t, "../graph/testdata")
	for _, in := range inputs {
		t.Run(in.Name, func(t *testing.T) {
			decode := func() *state.ClusterState {
				cs := in.State(t)
				addBystanders(cs)
				return cs
			}
			cs := decode()
			want := output(t, cs)
			refs := ReferencesOf(cs)
			removed += removeUnreferenced(t, "Service", decode, refs, want, func(cs *state.ClusterState) map[types.NamespacedName]*corev1.Service { return cs.Services })
			removed += removeUnreferenced(t, "EndpointSlice", decode, refs, want, func(cs *state.ClusterState) map[types.NamespacedName]*discoveryv1.EndpointSlice {
				return cs.EndpointSlices
			})
			removed += removeUnreferenced(t, "Secret", decode, refs, want, func(cs *state.ClusterState) map[types.NamespacedName]*corev1.Secret { return cs.Secrets })
			removed += removeUnreferenced(t, "ConfigMap", decode, refs, want, func(cs *state.ClusterState) map[types.NamespacedName]*corev1.ConfigMap { return cs.ConfigMaps })
			without := decode()
			delete(without.Services, bystanderKey)
			delete(without.EndpointSlices, bystanderKey)
			delete(without.Secrets, bystanderKey)
			delete(without.ConfigMaps, bystanderKey)
			if got := output(t, without); !bytes.Equal(got, want) {
				t.Error("the bystanders changed the output")
			}
		})
	}
	if removed < 3*len(inputs) {
		t.Errorf("only %d unreferenced objects removed over %d cases", removed, len(inputs))
	}
}

// removeUnreferenced removes, one at a time from a fresh state, every object of the kind objects
// picks that refs say does not matter, checks that the output stays want, and returns how many
// it removed.
func removeUnreferenced[T any](t *testing.T, kind string, decode func() *state.ClusterState, refs References, want []byte, objects func(*state.ClusterState) map[types.NamespacedName]T) int {
	t.Helper()
	removed := 0
	for key, obj := range objects(decode()) {
		if refs.Matters(obj) {
			continue
		}
		pruned := decode()
		delete(objects(pruned), key)
		removed++
		if got := output(t, pruned); !bytes.Equal(got, want) {
			t.Errorf("removing %s %s, which References say does not matter, changed the output", kind, key)
		}
	}
	return removed
}

var bystanderKey = state.Key(&metav1.ObjectMeta{Namespace: "default", Name: "bystander"})

// addBystanders adds a Service, its EndpointSlice, a TLS Secret and a ConfigMap holding a
// ca.crt that nothing references.
func addBystanders(cs *state.ClusterState) {
	meta := metav1.ObjectMeta{Namespace: "default", Name: "bystander"}
	cs.Services[bystanderKey] = &corev1.Service{ObjectMeta: meta, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  meta,
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.9.9.9"}}},
	}
	slice.Labels = map[string]string{discoveryv1.LabelServiceName: "bystander"}
	cs.EndpointSlices[bystanderKey] = slice
	cs.Secrets[bystanderKey] = &corev1.Secret{ObjectMeta: meta, Type: corev1.SecretTypeTLS}
	cs.ConfigMaps[bystanderKey] = &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"ca.crt": "not a certificate"}}
}

func TestReferencesCoverWhatRoutesListenersAndPoliciesName(t *testing.T) {
	t.Parallel()
	cs, err := state.Decode(bytes.NewReader([]byte(`
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: web, namespace: infra}
spec:
  gatewayClassName: any
  tls:
    frontend:
      default:
        validation:
          caCertificateRefs:
          - {group: "", kind: ConfigMap, name: client-ca}
      perPort:
      - port: 8443
        tls:
          validation:
            caCertificateRefs:
            - {group: "", kind: ConfigMap, name: partner-ca, namespace: pki}
            - {group: "", kind: Secret, name: not-a-configmap-either}
  listeners:
  - name: https
    port: 443
    protocol: HTTPS
    tls:
      certificateRefs:
      - name: own-cert
      - name: shared-cert
        namespace: certs
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: app}
spec:
  rules:
  - filters:
    - type: RequestMirror
      requestMirror:
        backendRef: {name: rule-mirror, port: 80}
    backendRefs:
    - name: missing-yet
      port: 80
      filters:
      - type: RequestMirror
        requestMirror:
          backendRef: {name: backend-mirror, namespace: other, port: 80}
---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {name: p, namespace: app}
spec:
  targetRefs:
  - {group: "", kind: Service, name: missing-yet}
  validation:
    hostname: backend.example.com
    caCertificateRefs:
    - {group: "", kind: ConfigMap, name: backend-ca}
    - {group: "", kind: Secret, name: not-a-configmap}
`)))
	if err != nil {
		t.Fatal(err)
	}
	refs := ReferencesOf(cs)
	// Proxy Services matter by what they are, including one the state does not hold yet.
	proxySvc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "coxswain-system", Name: "team-web-1234", Labels: map[string]string{ProxyLabel: ProxyLabelValue}}}
	sharedSvc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "coxswain-system", Name: "apps-web-5678", Annotations: map[string]string{"gateway.coxswain.dev/gateway": "apps/web"}}}
	svc := func(ns, name string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	slice := func(ns, service string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: service + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: service}}}
	}
	secret := func(ns, name string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	configMap := func(ns, name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	for _, tt := range []struct {
		obj  any
		want bool
	}{
		{svc("app", "missing-yet"), true},
		{svc("app", "rule-mirror"), true},
		{svc("other", "backend-mirror"), true},
		{proxySvc, true},
		{sharedSvc, true},
		{slice("app", "missing-yet"), true},
		{slice("other", "backend-mirror"), true},
		{secret("infra", "own-cert"), true},
		{secret("certs", "shared-cert"), true},
		{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "any"}}, true},
		{svc("other", "missing-yet"), false},
		{svc("app", "unrelated"), false},
		{slice("app", "unrelated"), false},
		{secret("app", "own-cert"), false},
		{secret("infra", "unrelated"), false},
		{configMap("app", "backend-ca"), true},
		{configMap("other", "backend-ca"), false},
		{configMap("app", "not-a-configmap"), false},
		{configMap("infra", "client-ca"), true},
		{configMap("pki", "partner-ca"), true},
		{configMap("app", "client-ca"), false},
		{configMap("infra", "not-a-configmap-either"), false},
	} {
		if got := refs.Matters(tt.obj); got != tt.want {
			t.Errorf("Matters(%T %v) = %v, want %v", tt.obj, tt.obj.(metav1.Object).GetName(), got, tt.want)
		}
	}
}

func TestReferenceFilterLetsEverythingThroughDuringALoad(t *testing.T) {
	t.Parallel()
	unrelated := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "unrelated"}}
	var f ReferenceFilter
	if !f.Matters(unrelated) {
		t.Error("before the first Load, a change did not matter")
	}
	f.BeginLoad()
	f.Loaded(state.New())
	if f.Matters(unrelated) {
		t.Error("after a Load, an unreferenced Service mattered")
	}
	f.BeginLoad()
	if !f.Matters(unrelated) {
		t.Error("during a Load, a change did not matter: one that lands after the cache read would be lost")
	}
	f.Loaded(nil) // a failed Load keeps the References it had
	if f.Matters(unrelated) {
		t.Error("after a failed Load, an unreferenced Service mattered")
	}
}

// Tests that the filter, which reads again only the routes that changed since the last Load,
// judges every Service and EndpointSlice as References computed afresh from the same state do,
// through random sequences of routes, Services and grants created, changed and deleted, with
// every other Load giving every object behind a new pointer.
func TestReferenceFilterFollowsRoutesAsReferencesOf(t *testing.T) {
	t.Parallel()
	for seed := range uint64(4) {
		w := newChurn(t, seed+100)
		var f ReferenceFilter
		for step := range 300 {
			w.step()
			cs := w.cs
			if step%2 == 0 {
				cs = reload(w.cs)
			}
			f.BeginLoad()
			f.Loaded(cs)
			want := ReferencesOf(cs)
			for _, ns := range []string{"default", "team", "other"} {
				for i := range 5 {
					name := fmt.Sprintf("svc-%d", i)
					svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
					slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{
						Namespace: ns, Name: name + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: name},
					}}
					for _, obj := range []any{svc, slice} {
						if got, w := f.Matters(obj), want.Matters(obj); got != w {
							t.Fatalf("seed %d step %d: %s/%s (%T) matters %t, want %t", seed, step, ns, name, obj, got, w)
						}
					}
				}
			}
		}
	}
}
