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
// token's ServiceAccount. The API server's own check of the binding is cached for a few seconds
// after a successful review, so a pod deleted or replaced within that window is caught here.
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

// matchPod compares a live pod with the binding of a token.
func matchPod(pod *corev1.Pod, p bootstrap.Principal) error {
	if pod.UID != types.UID(p.PodUID) {
		return fmt.Errorf("%w: pod %s/%s has UID %s, the token is bound to %s",
			bootstrap.ErrPodMismatch, pod.Namespace, pod.Name, pod.UID, p.PodUID)
	}
	if pod.Spec.ServiceAccountName != p.ServiceAccount {
		return fmt.Errorf("%w: pod %s/%s runs as ServiceAccount %q, the token is of %q",
			bootstrap.ErrPodMismatch, pod.Namespace, pod.Name, pod.Spec.ServiceAccountName, p.ServiceAccount)
	}
	return nil
}
