package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/api/v1alpha1"
	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/printable"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/servertest"
	"coxswain.dev/coxswain/discovery/server/stream"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/graph/conditions"
	"coxswain.dev/coxswain/internal/provision"
	"coxswain.dev/coxswain/internal/rebuild"
	"coxswain.dev/coxswain/internal/scopeauth"
	"coxswain.dev/coxswain/internal/status"
)

// startAppliedGatewayAPI runs the reconciler as main wires it for Programmed: a real stream
// listener on loopback mTLS serves the pipeline's snapshots and tells it every answer, and the
// status writer judges from them. namespace is the operator's. It returns the harness and the
// listener's address with its PKI.
func startAppliedGatewayAPI(t *testing.T, namespace string) (*gatewayAPI, string, *servertest.PKI) {
	t.Helper()
	h := &gatewayAPI{t: t, c: newGatewayClient(t), cache: cache.New(nil), auth: scopeauth.New(), metrics: prometheus.NewRegistry()}
	h.leader.Store(true)
	metrics, err := rebuild.NewMetrics(h.metrics)
	if err != nil {
		t.Fatal(err)
	}
	h.pipeline = &rebuild.Pipeline{
		Graph: graph.Options{Namespace: namespace},
		Cache: h.cache, Authority: h.auth, IsLeader: h.leader.Load, Metrics: metrics,
	}
	pki := servertest.NewPKI(t)
	srv, err := stream.New(stream.Config{
		TrustDomain: pki.TD, Bundles: pki.Bundle, Cache: h.cache, Scopes: h.auth,
		InstallNamespace: namespace, OnAnswer: h.pipeline.Answered,
	})
	if err != nil {
		t.Fatal(err)
	}
	gs, err := srv.NewGRPCServer(pki.StreamServerTLS())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	addr := servertest.Serve(t, gs)
	h.pipeline.Proxies = srv.Proxies
	h.debouncer = rebuild.NewDebouncer(20*time.Millisecond, nil)
	runManager(t, ctrl.Options{Scheme: gatewayScheme, Cache: crcache.Options{ByObject: GatewayAPICacheOptions()}}, func(mgr ctrl.Manager) error {
		h.pipeline.Status = &status.Writer{
			Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Namespace: namespace,
			Recorder: mgr.GetEventRecorder("coxswain"), Applied: h.pipeline.Applied,
		}
		r := &GatewayAPIReconciler{Client: mgr.GetClient(), Cache: mgr.GetCache(), Pipeline: h.pipeline, Debouncer: h.debouncer, afterRebuild: h.record}
		return r.SetupWithManager(mgr)
	})
	return h, addr, pki
}

// fakeProxy answers every snapshot of its stream as told: with a NACK carrying refuse when that
// is set, else with an ACK; while hold is set, an answer waits until hold is closed.
type fakeProxy struct {
	mu     sync.Mutex
	refuse string
	hold   chan struct{}
	// answered counts the answers sent.
	answered int
}

func (f *fakeProxy) set(refuse string, hold chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse, f.hold = refuse, hold
}

func (f *fakeProxy) answers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.answered
}

// run subscribes to scope over mTLS as ServiceAccount namespace/sa and answers until the test
// ends.
func (f *fakeProxy) run(t *testing.T, addr string, pki *servertest.PKI, namespace, sa string, scope cache.Scope) {
	t.Helper()
	id := "spiffe://" + servertest.TrustDomain + "/ns/" + namespace + "/sa/" + sa
	conn := servertest.Dial(t, addr, pki.StreamClientTLS(pki.SVID(t, id)))
	s, err := discoveryv1.NewDiscoveryClient(conn).Stream(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	err = s.Send(&discoveryv1.ClientMessage{Kind: &discoveryv1.ClientMessage_Subscribe{Subscribe: &discoveryv1.Subscribe{
		WireVersion: discoveryv1.WireVersion, NodeId: "proxy-0", Scope: scope.Proto(),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { <-done })
	go func() {
		defer close(done)
		for {
			msg, err := s.Recv()
			if err != nil {
				return // the test ended
			}
			if err := f.answer(s, msg.GetSnapshot()); err != nil {
				return
			}
		}
	}()
}

func (f *fakeProxy) answer(s discoveryv1.Discovery_StreamClient, snap *discoveryv1.Snapshot) error {
	f.mu.Lock()
	hold := f.hold
	f.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-s.Context().Done():
			return s.Context().Err()
		}
	}
	f.mu.Lock()
	refuse := f.refuse
	f.answered++
	f.mu.Unlock()
	if refuse != "" {
		return s.Send(&discoveryv1.ClientMessage{Kind: &discoveryv1.ClientMessage_Nack{Nack: &discoveryv1.Nack{
			Version: snap.GetVersion(), Nonce: snap.GetNonce(), Detail: refuse,
		}}})
	}
	return s.Send(&discoveryv1.ClientMessage{Kind: &discoveryv1.ClientMessage_Ack{Ack: &discoveryv1.Ack{
		Version: snap.GetVersion(), Nonce: snap.GetNonce(),
	}}})
}

// programmedAt checks the stored Gateway's Programmed condition: its status, reason, that its
// message holds msg, and that it was computed for generation.
func programmedAt(h *gatewayAPI, ns, name string, st metav1.ConditionStatus, reason, msg string, generation int64) func() error {
	return func() error {
		var gw gwapiv1.Gateway
		h.get(&gw, ns, name)
		c := meta.FindStatusCondition(gw.Status.Conditions, string(gwapiv1.GatewayConditionProgrammed))
		switch {
		case c == nil:
			return errors.New("no Programmed condition")
		case c.Status != st || c.Reason != reason || !strings.Contains(c.Message, msg):
			return fmt.Errorf("Programmed is %s/%s (%s), want %s/%s with %q", c.Status, c.Reason, c.Message, st, reason, msg)
		case c.ObservedGeneration != generation || gw.Generation != generation:
			return fmt.Errorf("Programmed is of generation %d, the Gateway at %d, want %d", c.ObservedGeneration, gw.Generation, generation)
		}
		return nil
	}
}

// Tests against the real API server and a real mTLS stream that Programmed means applied, in
// the shared pool: a proxy that NACKs leaves the Gateway Programmed=False (Invalid) with a
// Warning event, naming the proxy but not copying its error, which may concern another tenant's
// Gateway; one that ACKs makes it Programmed=True at the generation it applied; and a new
// generation is Programmed=Unknown (Pending) until the proxy ACKs a snapshot holding it.
func TestProgrammedFollowsTheProxysAnswers(t *testing.T) {
	ns := newNamespace(t)
	h, addr, pki := startAppliedGatewayAPI(t, ns)
	proxy := &fakeProxy{refuse: "listener other/web/443: certificate does not match its key"}
	proxy.run(t, addr, pki, ns, wellknown.SharedProxyServiceAccount, cache.SharedPool())

	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	h.create(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: wellknown.SharedGatewayServiceName(ns, "web"),
			Annotations: map[string]string{graph.SharedServiceGatewayAnnotation: ns + "/web"},
		},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(20042)}}},
	})
	gw := newGateway(ns, "web", class)
	h.create(gw)
	eventually(t, "a refused generation 1 is Programmed=False, naming the proxy",
		programmedAt(h, ns, "web", metav1.ConditionFalse, string(gwapiv1.GatewayReasonInvalid), "Proxy proxy-0", 1))
	eventually(t, "a Warning event says the proxy refused it", warningEvent(h, ns, "web", string(gwapiv1.GatewayReasonInvalid)))
	var stored gwapiv1.Gateway
	h.get(&stored, ns, "web")
	if c := meta.FindStatusCondition(stored.Status.Conditions, string(gwapiv1.GatewayConditionProgrammed)); strings.Contains(c.Message, "other/web") {
		t.Errorf("a shared pool Gateway's status copies the proxy's error: %q", c.Message)
	}

	// The proxy accepts from now on; the refused version is not sent again, generation 2 is.
	proxy.set("", nil)
	editSpec(t, h.c, gw, func(g *gwapiv1.Gateway) { g.Spec.Listeners[0].Port = 81 })
	eventually(t, "an acknowledged generation 2 is Programmed=True",
		programmedAt(h, ns, "web", metav1.ConditionTrue, string(gwapiv1.GatewayReasonProgrammed), "", 2))

	// Generation 3 waits for an ACK the proxy holds back.
	hold := make(chan struct{})
	proxy.set("", hold)
	before := proxy.answers()
	editSpec(t, h.c, gw, func(g *gwapiv1.Gateway) { g.Spec.Listeners[0].Port = 82 })
	eventually(t, "generation 3 not yet acknowledged is Programmed=Unknown, Pending",
		programmedAt(h, ns, "web", metav1.ConditionUnknown, string(gwapiv1.GatewayReasonPending), "apply generation 3", 3))
	time.Sleep(300 * time.Millisecond) // long enough for a wrong write to land; no synchronisation rests on it
	if err := programmedAt(h, ns, "web", metav1.ConditionUnknown, string(gwapiv1.GatewayReasonPending), "", 3)(); err != nil {
		t.Fatalf("without an ACK: %v", err)
	}
	close(hold)
	eventually(t, "generation 3 acknowledged is Programmed=True",
		programmedAt(h, ns, "web", metav1.ConditionTrue, string(gwapiv1.GatewayReasonProgrammed), "", 3))
	if proxy.answers() == before {
		t.Error("Programmed turned True without an answer from the proxy")
	}
}

// Tests against the real API server and a real mTLS stream that a dedicated Gateway, once its
// provisioned proxy has an address and a ready replica, is Programmed=False (Invalid) with its
// proxy's error while the proxy NACKs, and Programmed=True at the generation the proxy ACKs.
func TestDedicatedGatewayShowsItsProxysRefusal(t *testing.T) {
	ns := newNamespace(t)
	h, addr, pki := startAppliedGatewayAPI(t, ns)
	startProvision(t, ns)
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	h.create(&v1alpha1.CoxswainGatewayParameters{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "params"}})
	gw := dedicatedGateway(ns, "edge", class)
	h.create(gw)
	name := wellknown.DedicatedProxyName("edge", class)
	h.readyProxy(ns, name, "203.0.113.9")

	proxy := &fakeProxy{refuse: "listener " + ns + "/edge/80: certificate does not match its key"}
	proxy.run(t, addr, pki, ns, name, cache.Gateway(ns, "edge"))
	eventually(t, "a refused generation 1 is Programmed=False with the proxy's error",
		programmedAt(h, ns, "edge", metav1.ConditionFalse, string(gwapiv1.GatewayReasonInvalid), "edge/80: certificate does not match its key", 1))

	proxy.set("", nil)
	editSpec(t, h.c, gw, func(g *gwapiv1.Gateway) { g.Spec.Listeners[0].Port = 81 })
	eventually(t, "an acknowledged generation 2 is Programmed=True",
		programmedAt(h, ns, "edge", metav1.ConditionTrue, string(gwapiv1.GatewayReasonProgrammed), "", 2))
}

// readyProxy plays the cloud controller and the kubelet for the provisioned proxy name: its
// Service gets the load balancer address, its Pod is reported ready.
func (h *gatewayAPI) readyProxy(ns, name, address string) {
	h.t.Helper()
	ctx := context.Background()
	var svc corev1.Service
	eventually(h.t, "the proxy Service exists", func() error {
		return h.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &svc)
	})
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: address}}
	if err := h.c.Status().Update(ctx, &svc); err != nil {
		h.t.Fatal(err)
	}
	var pod corev1.Pod
	eventually(h.t, "a proxy Pod exists", func() error {
		var pods corev1.PodList
		if err := h.c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{provision.InstanceLabel: name}); err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			return errors.New("no Pod yet")
		}
		pod = pods.Items[0]
		return nil
	})
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	if err := h.c.Status().Update(ctx, &pod); err != nil {
		h.t.Fatal(err)
	}
}

// Tests against the real API server and a real mTLS stream that what a dedicated Gateway's proxy
// says in a NACK (terminal escapes, a bidirectional override, a Secret of the Gateway's
// namespace, 10 KiB of text) reaches the Gateway's Programmed condition and Warning event
// printable and bounded, and that a ListenerSet of the Gateway in another namespace names the
// Gateway only, not the proxy's error.
func TestAProxysRefusalReachesStatusPrintableAndStaysInItsNamespace(t *testing.T) {
	ns, other := newNamespace(t), newNamespace(t)
	h, addr, pki := startAppliedGatewayAPI(t, ns)
	startProvision(t, ns)
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	h.create(&v1alpha1.CoxswainGatewayParameters{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "params"}})
	gw := dedicatedGateway(ns, "edge", class)
	gw.Spec.AllowedListeners = &gwapiv1.AllowedListeners{Namespaces: &gwapiv1.ListenerNamespaces{From: ptr.To(gwapiv1.NamespacesFromAll)}}
	h.create(gw)
	h.create(newListenerSet(other, "tenant", ns, "edge", 8081, "tenant.example.com"))
	name := wellknown.DedicatedProxyName("edge", class)
	h.readyProxy(ns, name, "203.0.113.9")

	secret := "Secret " + ns + "/edge-tls-key"
	proxy := &fakeProxy{refuse: "\x1b[31m" + secret + " does not match its certificate\u202e\x1b[2J\r\n" + strings.Repeat("x", 10<<10)}
	proxy.run(t, addr, pki, ns, name, cache.Gateway(ns, "edge"))
	eventually(t, "a refused generation 1 is Programmed=False with the proxy's error",
		programmedAt(h, ns, "edge", metav1.ConditionFalse, string(gwapiv1.GatewayReasonInvalid), secret+" does not match its certificate", 1))
	var stored gwapiv1.Gateway
	h.get(&stored, ns, "edge")
	c := meta.FindStatusCondition(stored.Status.Conditions, string(gwapiv1.GatewayConditionProgrammed))
	if !printable.Clean(c.Message) || len(c.Message) > status.MaxProxyMessage || !strings.HasSuffix(c.Message, printable.Ellipsis) {
		t.Errorf("Programmed message (%d bytes) %q: want it printable, cut with an ellipsis within %d bytes", len(c.Message), c.Message, status.MaxProxyMessage)
	}
	eventually(t, "the Warning event is printable and bounded", func() error {
		var list eventsv1.EventList
		if err := h.c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.Name != "edge" || e.Reason != string(gwapiv1.GatewayReasonInvalid) {
				continue
			}
			if !printable.Clean(e.Note) || len(e.Note) > status.MaxProxyMessage || !strings.Contains(e.Note, secret) {
				return fmt.Errorf("event note (%d bytes) %q is not printable and bounded", len(e.Note), e.Note)
			}
			return nil
		}
		return fmt.Errorf("no Invalid event among %d", len(list.Items))
	})
	eventually(t, "the ListenerSet of another namespace names the Gateway only", func() error {
		var ls gwapiv1.ListenerSet
		h.get(&ls, other, "tenant")
		c := meta.FindStatusCondition(ls.Status.Conditions, string(gwapiv1.ListenerSetConditionProgrammed))
		switch {
		case c == nil || c.Reason != conditions.ReasonParentNotProgrammed:
			return fmt.Errorf("Programmed = %+v, want ParentNotProgrammed", c)
		case strings.Contains(c.Message, secret) || strings.Contains(c.Message, "proxy-0") || !strings.Contains(c.Message, ns+"/edge"):
			return fmt.Errorf("message %q copies the proxy's error or does not name the Gateway", c.Message)
		}
		return nil
	})
}
