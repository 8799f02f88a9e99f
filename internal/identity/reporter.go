package identity

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/server/bootstrap"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reporter implements bootstrap.Reporter with a BootstrapRejected Warning event about an object
// of the controller's namespace, so that
//
//	kubectl -n <ns> get events --field-selector reason=BootstrapRejected
//
// lists the refusals. The note carries the principal, the reason and the detail, never a token.
// Events aggregate per (reason, principal): the action is the refusal's reason and the related
// object the principal's ServiceAccount, both part of the recorder's series key, so repeats of
// one refusal fold into one counted series without swallowing the notes of other refusals.
// The bootstrap service already limits how often one (reason, principal) is reported.
type Reporter struct {
	recorder  events.EventRecorder
	regarding *corev1.ObjectReference
}

var _ bootstrap.Reporter = (*Reporter)(nil)

// NewReporter returns a Reporter that records events about regarding with recorder (the
// manager's GetEventRecorder). The recorder drops events rather than block when its queue is
// full, and its series logic folds a flood of identical refusals into one counted event.
func NewReporter(recorder events.EventRecorder, regarding corev1.ObjectReference) *Reporter {
	return &Reporter{recorder: recorder, regarding: &regarding}
}

// BootstrapRejected records one refusal.
func (r *Reporter) BootstrapRejected(_ context.Context, rej bootstrap.Rejection) {
	note := fmt.Sprintf("Rejected bootstrap of %s (reason %s, code %s) from %s: %s",
		principalString(rej.Principal), rej.Reason, rej.Code, peerString(rej.Peer), rej.Message)
	if rej.Suppressed > 0 {
		note += fmt.Sprintf(" (%d more like it not reported)", rej.Suppressed)
	}
	if len(note) > wellknown.MaxEventNoteBytes {
		note = note[:wellknown.MaxEventNoteBytes]
	}
	r.recorder.Eventf(r.regarding, related(rej.Principal), corev1.EventTypeWarning, wellknown.EventReasonBootstrapRejected,
		string(rej.Reason), "%s", note)
}

// related is the principal's ServiceAccount, nil for a refusal before authentication.
func related(p bootstrap.Principal) runtime.Object {
	if p.Namespace == "" || p.ServiceAccount == "" {
		return nil
	}
	return &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.ServiceAccount},
	}
}

func principalString(p bootstrap.Principal) string {
	if p.PodName != "" {
		return p.String() + " (pod " + p.PodName + ")"
	}
	return p.String()
}

func peerString(peer string) string {
	if peer == "" {
		return "an unknown peer"
	}
	return peer
}

// ControllerReference returns the object BootstrapRejected events are about: the controller's
// own Pod when podName is known (the downward API's POD_NAME), so that each replica's refusals
// show on `kubectl describe pod`; otherwise the CoxswainConfig the operator reads, which every
// replica shares. Both live in the controller namespace, where the events are recorded.
func ControllerReference(namespace, podName, configName string) corev1.ObjectReference {
	if podName != "" {
		return corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: namespace, Name: podName}
	}
	return corev1.ObjectReference{
		APIVersion: v1alpha1.GroupVersion.String(), Kind: "CoxswainConfig", Namespace: namespace, Name: configName,
	}
}
