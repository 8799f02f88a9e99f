package identity

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"coxswain.dev/coxswain/discovery/server/bootstrap"
)

// checkPod requires the pod a token is bound to to exist now, with the bound UID, running as the
// token's ServiceAccount, and to run (see matchPod). The API server's own check of the binding is
// cached for a few seconds after a successful review, and it accepts tokens of pods that have
// finished or are being deleted, so those are caught here.
func (a *Authenticator) checkPod(ctx context.Context, p bootstrap.Principal) error {
	var pod corev1.Pod
	err := a.pods.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: p.PodName}, &pod)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%w: pod %s/%s does not exist", bootstrap.ErrPodMismatch, p.Namespace, p.PodName)
	case err != nil:
		return classify(fmt.Sprintf("get pod %s/%s", p.Namespace, p.PodName), err, bootstrap.ErrUnauthenticated)
	}
	return matchPod(&pod, p)
}

// matchPod compares a live pod with the binding of a token, and requires it to run: scheduled to
// a node, not finished (Succeeded or Failed) and not being deleted. A Pending pod on a node
// passes: the kubelet reports Running only after its containers started, and a proxy bootstraps
// the moment it starts.
func matchPod(pod *corev1.Pod, p bootstrap.Principal) error {
	if pod.UID != types.UID(p.PodUID) {
		return fmt.Errorf("%w: pod %s/%s has UID %s, the token is bound to %s",
			bootstrap.ErrPodMismatch, pod.Namespace, pod.Name, pod.UID, p.PodUID)
	}
	if pod.Spec.ServiceAccountName != p.ServiceAccount {
		return fmt.Errorf("%w: pod %s/%s runs as ServiceAccount %q, the token is of %q",
			bootstrap.ErrPodMismatch, pod.Namespace, pod.Name, pod.Spec.ServiceAccountName, p.ServiceAccount)
	}
	switch {
	case pod.DeletionTimestamp != nil:
		return fmt.Errorf("%w: pod %s/%s is terminating", bootstrap.ErrPodMismatch, pod.Namespace, pod.Name)
	case pod.Spec.NodeName == "":
		return fmt.Errorf("%w: pod %s/%s is not scheduled to a node", bootstrap.ErrPodMismatch, pod.Namespace, pod.Name)
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return fmt.Errorf("%w: pod %s/%s has finished (phase %s)", bootstrap.ErrPodMismatch, pod.Namespace, pod.Name, pod.Status.Phase)
	}
	return nil
}
