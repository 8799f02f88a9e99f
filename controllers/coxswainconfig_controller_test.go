package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/internal/readiness"
	"coxswain.dev/coxswain/internal/settings"
)

func TestCRDsAreInstalledAndEstablished(t *testing.T) {
	t.Parallel()
	names := []string{
		"coxswainconfigs.gateway.coxswain.dev",
		"coxswaingatewayparameters.gateway.coxswain.dev",
		"gatewayclasses.gateway.networking.k8s.io",
		"gateways.gateway.networking.k8s.io",
		"httproutes.gateway.networking.k8s.io",
		"referencegrants.gateway.networking.k8s.io",
		"grpcroutes.gateway.networking.k8s.io",
	}
	// A scheme of its own: adding to client-go's global one would race the event recorders
	// other tests leave running.
	crds := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(crds); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: crds})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := c.Get(context.Background(), types.NamespacedName{Name: name}, &crd); err != nil {
			t.Errorf("CRD %s: %v", name, err)
			continue
		}
		established := false
		for _, cond := range crd.Status.Conditions {
			established = established || cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue
		}
		if !established {
			t.Errorf("CRD %s is not Established", name)
		}
	}
}

// createRaw creates a CoxswainConfig from an unstructured spec, so tests can send values the Go
// types cannot hold.
func createRaw(ns string, spec map[string]any) error {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(),
		"kind":       "CoxswainConfig",
		"metadata":   map[string]any{"generateName": "bad-", "namespace": ns},
		"spec":       spec,
	}}
	return k8sClient.Create(context.Background(), obj)
}

func TestTheAPIServerRejectsInvalidFields(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	discovery := func(kv ...any) map[string]any {
		d := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			d[kv[i].(string)] = kv[i+1]
		}
		return map[string]any{"discovery": d}
	}
	tracing := func(t map[string]any) map[string]any { return map[string]any{"proxy": map[string]any{"tracing": t}} }
	tests := []struct {
		name      string
		spec      map[string]any
		wantField string
	}{
		{"a trust domain with a scheme", discovery("trustDomain", "spiffe://cluster.local"), "spec.discovery.trustDomain"},
		{"a trust domain with a port", discovery("trustDomain", "cluster.local:8443"), "spec.discovery.trustDomain"},
		{"a trust domain with a path", discovery("trustDomain", "cluster.local/ns"), "spec.discovery.trustDomain"},
		{"a trust domain with uppercase letters", discovery("trustDomain", "Cluster.Local"), "spec.discovery.trustDomain"},
		{"an empty trust domain", discovery("trustDomain", ""), "spec.discovery.trustDomain"},
		{"an SVID TTL under one minute", discovery("svidTTL", "30s"), "spec.discovery.svidTTL"},
		{"an SVID TTL over thirty days", discovery("svidTTL", "721h"), "spec.discovery.svidTTL"},
		{"an SVID TTL that is not a duration", discovery("svidTTL", "a day"), "spec.discovery.svidTTL"},
		{"port zero", discovery("port", 0), "spec.discovery.port"},
		{"a port over 65535", discovery("port", 65536), "spec.discovery.port"},
		{"bootstrap port zero", discovery("bootstrapPort", 0), "spec.discovery.bootstrapPort"},
		{"equal ports", discovery("port", 7000, "bootstrapPort", 7000), "discovery.bootstrapPort must differ"},
		{"an unknown CA mode", discovery("ca", map[string]any{"mode": "Manual"}), "spec.discovery.ca.mode"},
		{"a CA Secret name that is not a DNS name", discovery("ca", map[string]any{"secretName": "My_CA"}), "spec.discovery.ca.secretName"},
		{"negative proxy replicas", map[string]any{"proxy": map[string]any{"replicas": -1}}, "spec.proxy.replicas"},
		{"a tracing endpoint without a scheme", tracing(map[string]any{"endpoint": "collector:4317"}), "spec.proxy.tracing.endpoint"},
		{"a tracing endpoint with a query", tracing(map[string]any{"endpoint": "http://collector:4318/v1/traces?x=1"}), "spec.proxy.tracing.endpoint"},
		{"an unknown tracing protocol", tracing(map[string]any{"endpoint": "http://c:4317", "protocol": "thrift"}), "spec.proxy.tracing.protocol"},
		{
			"a sampling fraction over one", tracing(map[string]any{"endpoint": "http://c:4317", "samplingFraction": map[string]any{"numerator": 101}}),
			"numerator must not exceed denominator",
		},
		{
			"a sampling fraction over zero", tracing(map[string]any{"endpoint": "http://c:4317", "samplingFraction": map[string]any{"numerator": 1, "denominator": 0}}),
			"spec.proxy.tracing.samplingFraction.denominator",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name+" is rejected", func(t *testing.T) {
			t.Parallel()
			err := createRaw(ns, tt.spec)
			if !apierrors.IsInvalid(err) {
				t.Fatalf("create error = %v, want Invalid", err)
			}
			if !strings.Contains(err.Error(), tt.wantField) {
				t.Errorf("error %q does not name %q", err, tt.wantField)
			}
		})
	}
	t.Run("a config with every field valid is accepted", func(t *testing.T) {
		t.Parallel()
		err := createRaw(ns, map[string]any{
			"discovery": map[string]any{
				"ca":          map[string]any{"mode": "External", "secretName": "my-ca"},
				"trustDomain": "prod.example_1-a", "svidTTL": "1m", "port": 1, "bootstrapPort": 65535,
			},
			"proxy": map[string]any{"image": "proxy:1", "replicas": 0, "tracing": map[string]any{
				"endpoint": "https://otel.example.com:4318/v1/traces", "protocol": "http/protobuf",
				"samplingFraction": map[string]any{"numerator": 1, "denominator": 1000},
			}},
		})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
	})
}

type harness struct {
	ns    string
	key   types.NamespacedName
	store *settings.Store
	board *readiness.Board
}

// runReconciler starts a CoxswainConfig reconciler, as the leader, over base settings.
func runReconciler(t *testing.T, base settings.Settings) harness {
	t.Helper()
	ns := newNamespace(t)
	h := harness{
		ns: ns, key: types.NamespacedName{Namespace: ns, Name: "coxswain"},
		store: settings.NewStore(base),
		board: readiness.NewBoard(v1alpha1.ConditionCAReady, v1alpha1.ConditionDiscoveryServing, v1alpha1.ConditionTrustBundlePublished),
	}
	startManager(t, func(mgr ctrl.Manager) error {
		r := &CoxswainConfigReconciler{
			Client: mgr.GetClient(), Key: h.key, Base: base, Store: h.store, Board: h.board,
			Recorder: mgr.GetEventRecorder("coxswain"), IsLeader: func() bool { return true },
		}
		return r.SetupWithManager(mgr)
	})
	return h
}

func (h harness) status(t *testing.T) (v1alpha1.CoxswainConfig, error) {
	t.Helper()
	var cfg v1alpha1.CoxswainConfig
	err := k8sClient.Get(context.Background(), h.key, &cfg)
	return cfg, err
}

func TestStatusShowsTheEffectiveSettingsAndTheirPrecedence(t *testing.T) {
	t.Parallel()
	base := settings.Defaults()
	base.TrustDomain, base.SVIDTTL = "flag.example", 2*time.Hour // as if from flags
	h := runReconciler(t, base)
	cfg := &v1alpha1.CoxswainConfig{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: h.key.Name},
		Spec: v1alpha1.CoxswainConfigSpec{Discovery: &v1alpha1.DiscoverySpec{
			TrustDomain: ptrTo("resource.example"), Port: ptrTo[int32](6000),
		}},
	}
	if err := k8sClient.Create(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	eventually(t, "status shows the effective settings", func() error {
		got, err := h.status(t)
		if err != nil {
			return err
		}
		e := got.Status.Effective
		switch {
		case got.Status.ObservedGeneration != got.Generation:
			return fmt.Errorf("observedGeneration %d, generation %d", got.Status.ObservedGeneration, got.Generation)
		case e == nil:
			return errors.New("no effective settings")
		case e.TrustDomain != "resource.example":
			return fmt.Errorf("trustDomain %q: the resource must win over the flag", e.TrustDomain)
		case e.SVIDTTL.Duration != 2*time.Hour:
			return fmt.Errorf("svidTTL %s: the flag must apply where the resource is silent", e.SVIDTTL.Duration)
		case e.Port != 6000 || e.BootstrapPort != 50052:
			return fmt.Errorf("ports %d/%d, want 6000/50052", e.Port, e.BootstrapPort)
		}
		return nil
	})
	if got := h.store.Get(); got.TrustDomain != "resource.example" || got.Port != 6000 {
		t.Errorf("the store holds %s:%d, want the resolved settings", got.TrustDomain, got.Port)
	}
	got, _ := h.status(t)
	ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != ReasonComponentNotReady {
		t.Errorf("Ready = %+v, want False/%s while the components have not reported", ready, ReasonComponentNotReady)
	}
	for _, typ := range []string{v1alpha1.ConditionCAReady, v1alpha1.ConditionDiscoveryServing, v1alpha1.ConditionTrustBundlePublished} {
		if c := meta.FindStatusCondition(got.Status.Conditions, typ); c == nil || c.Status != metav1.ConditionUnknown {
			t.Errorf("condition %s = %+v, want Unknown", typ, c)
		}
	}

	t.Run("components reporting True make the config Ready", func(t *testing.T) {
		for _, typ := range []string{v1alpha1.ConditionCAReady, v1alpha1.ConditionDiscoveryServing, v1alpha1.ConditionTrustBundlePublished} {
			h.board.Report(typ, metav1.ConditionTrue, "Ok", "ok")
		}
		eventually(t, "Ready becomes True", func() error {
			got, err := h.status(t)
			if err != nil {
				return err
			}
			if !meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionReady) {
				return fmt.Errorf("conditions %+v", got.Status.Conditions)
			}
			return nil
		})
	})
}

func TestSettingsTheSchemaCannotCheckAreRejectedWithACondition(t *testing.T) {
	t.Parallel()
	base := settings.Defaults() // bootstrap port 50052 from the flags
	h := runReconciler(t, base)
	cfg := &v1alpha1.CoxswainConfig{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: h.key.Name},
		Spec:       v1alpha1.CoxswainConfigSpec{Discovery: &v1alpha1.DiscoverySpec{Port: ptrTo(base.BootstrapPort), TrustDomain: ptrTo("new.example")}},
	}
	if err := k8sClient.Create(context.Background(), cfg); err != nil {
		t.Fatalf("the schema cannot see the flag's bootstrap port, so the API server accepts: %v", err)
	}
	eventually(t, "Ready is False with InvalidSettings", func() error {
		got, err := h.status(t)
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonInvalidSettings {
			return fmt.Errorf("Ready = %+v", c)
		}
		if !strings.Contains(c.Message, "discovery.bootstrapPort") {
			return fmt.Errorf("message %q does not name the field", c.Message)
		}
		return nil
	})
	if got := h.store.Get(); got.TrustDomain != base.TrustDomain || got.Port != base.Port {
		t.Errorf("the store holds %s:%d; a rejected config must keep the settings in force", got.TrustDomain, got.Port)
	}
	eventually(t, "a Warning event names the problem", func() error {
		var list eventsv1.EventList
		if err := k8sClient.List(context.Background(), &list, client.InNamespace(h.ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Reason == ReasonInvalidSettings && e.Type == "Warning" && e.Regarding.Name == h.key.Name {
				return nil
			}
		}
		return fmt.Errorf("no %s event among %d", ReasonInvalidSettings, len(list.Items))
	})

	t.Run("fixing the config applies it", func(t *testing.T) {
		got, err := h.status(t)
		if err != nil {
			t.Fatal(err)
		}
		got.Spec.Discovery.Port = ptrTo[int32](6000)
		if err := k8sClient.Update(context.Background(), &got); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the store takes the fixed settings", func() error {
			if s := h.store.Get(); s.Port != 6000 || s.TrustDomain != "new.example" {
				return fmt.Errorf("store holds %s:%d", s.TrustDomain, s.Port)
			}
			return nil
		})
	})
}

func TestWithoutAConfigTheFlagSettingsApply(t *testing.T) {
	t.Parallel()
	base := settings.Defaults()
	base.TrustDomain = "flag.example"
	h := runReconciler(t, base)
	h.store.Set(settings.Defaults()) // something else, to see the reconciler publish base
	eventually(t, "the store holds the flag settings", func() error {
		if got := h.store.Get().TrustDomain; got != "flag.example" {
			return fmt.Errorf("trust domain %q", got)
		}
		return nil
	})
	if _, err := h.status(t); !apierrors.IsNotFound(err) {
		t.Errorf("get config: %v, want NotFound: the reconciler must not create one", err)
	}
}

func ptrTo[T any](v T) *T { return &v }

// Tests that a replica that is not the leader, with no CoxswainConfig to watch, still reads the
// settings once and marks them final: its discovery listeners wait for that (an SVID issued
// before would carry the flags' lifetime, not the configured one), so a replica that never
// got there would never serve.
func TestAReplicaThatIsNotTheLeaderMarksItsSettingsLoaded(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	// Another replica holds the lease for the whole test.
	now := metav1.NowMicro()
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coxswain-test-leader"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptrTo("another-replica"), LeaseDurationSeconds: ptrTo[int32](3600),
			AcquireTime: &now, RenewTime: &now,
		},
	}
	if err := k8sClient.Create(t.Context(), lease); err != nil {
		t.Fatal(err)
	}
	base := settings.Defaults()
	base.TrustDomain = "follower.example"
	store := settings.NewPendingStore(settings.Defaults())
	board := readiness.NewBoard(v1alpha1.ConditionCAReady)
	mgr := runManager(t, ctrl.Options{
		Scheme: scheme, LeaderElection: true, LeaderElectionID: lease.Name, LeaderElectionNamespace: ns,
	}, func(mgr ctrl.Manager) error {
		r := &CoxswainConfigReconciler{
			Client: mgr.GetClient(), Key: types.NamespacedName{Namespace: ns, Name: "coxswain"}, Base: base, Store: store, Board: board,
			Recorder: mgr.GetEventRecorder("coxswain"), IsLeader: func() bool { return false },
		}
		return r.SetupWithManager(mgr)
	})
	select {
	case <-store.Loaded():
	case <-time.After(30 * time.Second):
		t.Fatal("the settings were not marked loaded on a replica that is not the leader")
	}
	if got := store.Get().TrustDomain; got != "follower.example" {
		t.Errorf("trust domain %q, want the flags' follower.example", got)
	}
	select {
	case <-mgr.Elected():
		t.Error("this replica was elected although another holds the lease: the test proves nothing")
	default:
	}
}
