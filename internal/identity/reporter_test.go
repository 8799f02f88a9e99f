package identity

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	"coxswain.dev/coxswain/discovery/server/bootstrap"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// Tests that a rejection becomes a BootstrapRejected Warning event in the controller namespace,
// listable by reason, whose note names the principal and the reason.
func TestReporterRecordsEvent(t *testing.T) {
	ns := newNamespace(t, "reporter")
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: clientset.EventsV1()})
	broadcaster.StartRecordingToSink(t.Context().Done())
	t.Cleanup(broadcaster.Shutdown)
	r := NewReporter(broadcaster.NewRecorder(scheme, "coxswain"), ControllerReference(ns, "coxswain-controller-0", "coxswain"))

	r.BootstrapRejected(t.Context(), bootstrap.Rejection{
		Principal: bootstrap.Principal{Namespace: "prod", ServiceAccount: "intruder"},
		Reason:    bootstrap.ReasonNotAllowed, Code: codes.PermissionDenied,
		Message: "identity may not hold an SVID", Peer: "10.0.0.7:40000",
	})

	var got []corev1.Event
	eventually(t, 10*time.Second, "the BootstrapRejected event", func() bool {
		list, err := clientset.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "reason=" + wellknown.EventReasonBootstrapRejected})
		if err != nil {
			t.Fatal(err)
		}
		got = list.Items
		return len(got) > 0
	})
	ev := got[0]
	if ev.Type != corev1.EventTypeWarning || ev.InvolvedObject.Kind != "Pod" || ev.InvolvedObject.Name != "coxswain-controller-0" {
		t.Errorf("event type %s about %s %s; want Warning about Pod coxswain-controller-0", ev.Type, ev.InvolvedObject.Kind, ev.InvolvedObject.Name)
	}
	for _, want := range []string{"prod/intruder", string(bootstrap.ReasonNotAllowed), "10.0.0.7:40000"} {
		if !strings.Contains(ev.Message, want) {
			t.Errorf("event note %q lacks %q", ev.Message, want)
		}
	}
}

// Tests that the events are about the CoxswainConfig when the controller's pod is unknown.
func TestControllerReferenceWithoutPod(t *testing.T) {
	t.Parallel()
	ref := ControllerReference("coxswain-system", "", "coxswain")
	if ref.Kind != "CoxswainConfig" || ref.Namespace != "coxswain-system" || ref.Name != "coxswain" || ref.APIVersion != "gateway.coxswain.dev/v1alpha1" {
		t.Fatalf("ControllerReference = %+v", ref)
	}
}

// Tests that refusals of different principals or reasons stay separate events, each with its
// own note, while a repeat of one refusal folds into its series.
func TestReporterAggregatesPerReasonAndPrincipal(t *testing.T) {
	ns := newNamespace(t, "reporter-series")
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: clientset.EventsV1()})
	broadcaster.StartRecordingToSink(t.Context().Done())
	t.Cleanup(broadcaster.Shutdown)
	r := NewReporter(broadcaster.NewRecorder(scheme, "coxswain"), ControllerReference(ns, "coxswain-controller-0", "coxswain"))
	refusals := []bootstrap.Rejection{
		{Principal: bootstrap.Principal{Namespace: "prod", ServiceAccount: "a"}, Reason: bootstrap.ReasonNotAllowed, Code: codes.PermissionDenied, Message: "first"},
		{Principal: bootstrap.Principal{Namespace: "prod", ServiceAccount: "b"}, Reason: bootstrap.ReasonNotAllowed, Code: codes.PermissionDenied, Message: "second"},
		{Principal: bootstrap.Principal{Namespace: "prod", ServiceAccount: "a", PodName: "a-0"}, Reason: bootstrap.ReasonPodMismatch, Code: codes.PermissionDenied, Message: "third"},
		{Reason: bootstrap.ReasonTokenRejected, Code: codes.Unauthenticated, Message: "fourth"},
	}
	for _, rej := range refusals {
		r.BootstrapRejected(t.Context(), rej)
	}
	want := []string{"prod/a (reason IdentityNotAllowed", "prod/b (reason IdentityNotAllowed", "prod/a (pod a-0) (reason PodMismatch", "unauthenticated (reason TokenRejected"}
	eventually(t, 10*time.Second, "one event per refusal", func() bool {
		list, err := clientset.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "reason=" + wellknown.EventReasonBootstrapRejected})
		if err != nil {
			t.Fatal(err)
		}
		found := 0
		for _, w := range want {
			for _, ev := range list.Items {
				if strings.Contains(ev.Message, w) {
					found++
					break
				}
			}
		}
		return found == len(want)
	})
}
