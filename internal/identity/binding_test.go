package identity

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/pki/pkitest"
	"coxswain.dev/coxswain/discovery/server/bootstrap"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/servertest"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// bootstrapEnv is the bootstrap listener on loopback TLS with the real Authenticator, allowlist
// and event Reporter against the test API server.
type bootstrapEnv struct {
	ns       string
	registry *prometheus.Registry
	client   discoveryv1.DiscoveryClient
}

func newBootstrapEnv(t *testing.T, ns string, auth *Authenticator, allowed ...string) *bootstrapEnv {
	t.Helper()
	p := servertest.NewPKI(t)
	bundle, err := p.Bundle.Bundle()
	if err != nil {
		t.Fatal(err)
	}
	allow := NewAllowlist(wellknown.InstallNamespace)
	for _, sa := range allowed {
		allow.Register(ns, sa)
	}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: clientset.EventsV1()})
	broadcaster.StartRecordingToSink(t.Context().Done())
	t.Cleanup(broadcaster.Shutdown)
	e := &bootstrapEnv{ns: ns, registry: prometheus.NewRegistry()}
	svc, err := bootstrap.New(bootstrap.Config{
		TrustDomain: p.TD, Authenticator: auth, Allowlist: allow, CA: bootstrap.StaticCA(p.CA, bundle),
		Reporter:   NewReporter(broadcaster.NewRecorder(scheme, "coxswain"), ControllerReference(ns, "coxswain-controller-0", "coxswain")),
		Registerer: e.registry, Logger: testr.New(t).WithName("bootstrap"),
	})
	if err != nil {
		t.Fatal(err)
	}
	gs, err := svc.NewGRPCServer(p.BootstrapServerTLS())
	if err != nil {
		t.Fatal(err)
	}
	e.client = discoveryv1.NewDiscoveryClient(servertest.Dial(t, servertest.Serve(t, gs), p.BootstrapClientTLS()))
	return e
}

func (e *bootstrapEnv) bootstrap(t *testing.T, token string) error {
	t.Helper()
	_, err := e.client.Bootstrap(t.Context(), &discoveryv1.BootstrapRequest{
		WireVersion: discoveryv1.WireVersion, Token: token, Csr: pkitest.CSR(t), Scope: cache.SharedPool().Proto(),
	})
	return err
}

// rejected is the count of coxswain_discovery_bootstrap_total{result="rejected",reason}.
func (e *bootstrapEnv) rejected(t *testing.T, reason bootstrap.Reason) float64 {
	t.Helper()
	families, err := e.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "coxswain_discovery_bootstrap_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if label(m, "result") == "rejected" && label(m, "reason") == string(reason) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// requireEvent waits for a BootstrapRejected event in e.ns whose note holds every one of want.
func (e *bootstrapEnv) requireEvent(t *testing.T, want ...string) {
	t.Helper()
	eventually(t, 10*time.Second, "a BootstrapRejected event naming "+strings.Join(want, ", "), func() bool {
		list, err := clientset.CoreV1().Events(e.ns).List(t.Context(), metav1.ListOptions{FieldSelector: "reason=" + wellknown.EventReasonBootstrapRejected})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range list.Items {
			if containsAll(ev.Message, want) {
				return true
			}
		}
		return false
	})
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// Tests that a token bound to no pod gets no SVID by default, even for an allowlisted
// ServiceAccount: whoever may mint tokens for a proxy's ServiceAccount must also run a pod as it.
// With discovery.allowUnboundTokens the same token passes.
func TestBootstrapRefusesUnboundTokens(t *testing.T) {
	ns := newNamespace(t, "unbound-tokens")
	newServiceAccount(t, ns, "proxy")
	token := requestToken(t, ns, "proxy", []string{wellknown.TokenAudience}, nil)

	e := newBootstrapEnv(t, ns, newAuthenticator(t), "proxy")
	err := e.bootstrap(t, token)
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), string(bootstrap.ReasonPodMismatch)) {
		t.Fatalf("bootstrap with an unbound token: %v; want PermissionDenied (PodMismatch)", err)
	}
	if got := e.rejected(t, bootstrap.ReasonPodMismatch); got != 1 {
		t.Errorf("rejected{PodMismatch} = %v, want 1", got)
	}
	e.requireEvent(t, ns+"/proxy", string(bootstrap.ReasonPodMismatch), "bound to no pod")

	allowing := newBootstrapEnv(t, ns, newAuthenticator(t).AllowUnbound(func() bool { return true }), "proxy")
	if err := allowing.bootstrap(t, token); err != nil {
		t.Fatalf("bootstrap with an unbound token while they are allowed: %v", err)
	}
}

// Tests that a token bound to a pod passes only while that pod runs: a pod that no node runs, a
// pod that has finished and a pod being deleted give no SVID, whatever the API server still
// authenticates.
func TestBootstrapRefusesTokensOfPodsThatDoNotRun(t *testing.T) {
	ns := newNamespace(t, "pod-not-running")
	// One ServiceAccount per case: the events of one (reason, principal) fold into one series.
	accounts := []string{"unscheduled", "finished", "terminating", "running"}
	for _, sa := range accounts {
		newServiceAccount(t, ns, sa)
	}
	e := newBootstrapEnv(t, ns, newAuthenticator(t), accounts...)
	tests := []struct {
		name   string
		pod    func(t *testing.T) *corev1.Pod
		detail string
	}{
		{"a token of a pod no node runs is refused", func(t *testing.T) *corev1.Pod {
			return newPodOn(t, ns, "unscheduled", "unscheduled", "")
		}, "not scheduled"},
		{"a token of a pod that has finished is refused", func(t *testing.T) *corev1.Pod {
			pod := newPod(t, ns, "finished", "finished")
			setPhase(t, pod, corev1.PodSucceeded)
			return pod
		}, "has finished"},
		{"a token of a pod being deleted is refused", func(t *testing.T) *corev1.Pod {
			pod := newPod(t, ns, "terminating", "terminating")
			terminate(t, pod)
			return pod
		}, "is terminating"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := tt.pod(t)
			sa := pod.Spec.ServiceAccountName
			token := requestToken(t, ns, sa, []string{wellknown.TokenAudience}, pod)
			err := e.bootstrap(t, token)
			if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), string(bootstrap.ReasonPodMismatch)) {
				t.Fatalf("bootstrap: %v; want PermissionDenied (PodMismatch)", err)
			}
			if got := e.rejected(t, bootstrap.ReasonPodMismatch); got != float64(i+1) {
				t.Errorf("rejected{PodMismatch} = %v, want %d", got, i+1)
			}
			e.requireEvent(t, ns+"/"+sa, "(pod "+pod.Name+")", string(bootstrap.ReasonPodMismatch), tt.detail)
		})
	}
	t.Run("a token of a running pod passes", func(t *testing.T) {
		pod := newPod(t, ns, "running", "running")
		setPhase(t, pod, corev1.PodRunning)
		if err := e.bootstrap(t, requestToken(t, ns, "running", []string{wellknown.TokenAudience}, pod)); err != nil {
			t.Fatalf("bootstrap: %v", err)
		}
	})
}

func setPhase(t *testing.T, pod *corev1.Pod, phase corev1.PodPhase) {
	t.Helper()
	pod.Status.Phase = phase
	if err := k8sClient.Status().Update(t.Context(), pod); err != nil {
		t.Fatalf("set phase of pod %s: %v", pod.Name, err)
	}
}

// terminate starts deleting pod and holds it in that state with a finalizer until the test ends.
func terminate(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	const finalizer = "coxswain.dev/test-hold"
	pod.Finalizers = append(pod.Finalizers, finalizer)
	if err := k8sClient.Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var cur corev1.Pod
		if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(pod), &cur); err != nil {
			return
		}
		cur.Finalizers = nil
		_ = k8sClient.Update(context.Background(), &cur) // best effort: the namespace goes with the test API server
	})
	if err := k8sClient.Delete(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
}
