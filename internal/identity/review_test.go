package identity

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"coxswain.dev/coxswain/discovery/server/bootstrap"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// fakeReviews answers every TokenReview with status, or fails with err.
type fakeReviews struct {
	client.Writer
	status authnv1.TokenReviewStatus
	err    error
}

func (f *fakeReviews) Create(_ context.Context, obj client.Object, _ ...client.CreateOption) error {
	if f.err != nil {
		return f.err
	}
	obj.(*authnv1.TokenReview).Status = f.status
	return nil
}

// fakePods answers every pod Get with pod, or fails with err.
type fakePods struct {
	client.Reader
	pod *corev1.Pod
	err error
}

func (f *fakePods) Get(_ context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	if f.err != nil {
		return f.err
	}
	*obj.(*corev1.Pod) = *f.pod
	return nil
}

func reviewOf(username string, extra map[string]authnv1.ExtraValue) authnv1.TokenReviewStatus {
	return authnv1.TokenReviewStatus{
		Authenticated: true,
		Audiences:     []string{wellknown.TokenAudience},
		User:          authnv1.UserInfo{Username: username, Extra: extra},
	}
}

var (
	proxyUser  = "system:serviceaccount:prod:gw-coxswain"
	boundExtra = map[string]authnv1.ExtraValue{extraPodName: {"gw-0"}, extraPodUID: {"uid-1"}}
	livePod    = &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "gw-0", UID: "uid-1"},
		Spec:       corev1.PodSpec{ServiceAccountName: "gw-coxswain", NodeName: "node-a"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	podResource = schema.GroupResource{Resource: "pods"}
	reviewRes   = schema.GroupResource{Group: "authentication.k8s.io", Resource: "tokenreviews"}
)

func withSA(pod *corev1.Pod, sa string) *corev1.Pod {
	p := pod.DeepCopy()
	p.Spec.ServiceAccountName = sa
	return p
}

// Tests the decisions the API server cannot be made to take on demand: odd reviews, API errors,
// and a live pod that does not match the binding.
func TestAuthenticateDecisions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		reviews fakeReviews
		pods    fakePods
		want    error
	}{
		{
			"a review authenticated without our audience is refused",
			fakeReviews{status: authnv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"api"}, User: authnv1.UserInfo{Username: proxyUser}}},
			fakePods{},
			bootstrap.ErrUnauthenticated,
		},
		{
			"a review of a user that is not a ServiceAccount is refused",
			fakeReviews{status: reviewOf("alice", nil)},
			fakePods{},
			bootstrap.ErrUnauthenticated,
		},
		{
			"a review naming a pod without its UID is refused",
			fakeReviews{status: reviewOf(proxyUser, map[string]authnv1.ExtraValue{extraPodName: {"gw-0"}})},
			fakePods{pod: livePod},
			bootstrap.ErrUnauthenticated,
		},
		{
			"a review the API server cannot reach is unavailable",
			fakeReviews{err: &net.OpError{Op: "dial", Err: errors.New("connection refused")}},
			fakePods{},
			bootstrap.ErrUnavailable,
		},
		{
			"a review failing with 500 is unavailable",
			fakeReviews{err: apierrors.NewInternalError(errors.New("etcd"))},
			fakePods{},
			bootstrap.ErrUnavailable,
		},
		{
			"a throttled review is unavailable",
			fakeReviews{err: apierrors.NewTooManyRequests("slow down", 1)},
			fakePods{},
			bootstrap.ErrUnavailable,
		},
		{
			"a forbidden review is refused",
			fakeReviews{err: apierrors.NewForbidden(reviewRes, "", errors.New("no"))},
			fakePods{},
			bootstrap.ErrUnauthenticated,
		},
		{
			"a token of a pod that no longer exists is refused",
			fakeReviews{status: reviewOf(proxyUser, boundExtra)},
			fakePods{err: apierrors.NewNotFound(podResource, "gw-0")},
			bootstrap.ErrPodMismatch,
		},
		{
			"a token of a pod with another UID is refused",
			fakeReviews{status: reviewOf(proxyUser, map[string]authnv1.ExtraValue{extraPodName: {"gw-0"}, extraPodUID: {"uid-0"}})},
			fakePods{pod: livePod},
			bootstrap.ErrPodMismatch,
		},
		{
			"a token of a pod running as another ServiceAccount is refused",
			fakeReviews{status: reviewOf(proxyUser, boundExtra)},
			fakePods{pod: withSA(livePod, "default")},
			bootstrap.ErrPodMismatch,
		},
		{
			"a token bound to no pod is refused",
			fakeReviews{status: reviewOf(proxyUser, nil)},
			fakePods{},
			bootstrap.ErrPodMismatch,
		},
		{
			"a token of a pod being deleted is refused",
			fakeReviews{status: reviewOf(proxyUser, boundExtra)},
			fakePods{pod: func() *corev1.Pod { p := livePod.DeepCopy(); p.DeletionTimestamp = &metav1.Time{}; return p }()},
			bootstrap.ErrPodMismatch,
		},
		{
			"a token of a pod that failed is refused",
			fakeReviews{status: reviewOf(proxyUser, boundExtra)},
			fakePods{pod: func() *corev1.Pod { p := livePod.DeepCopy(); p.Status.Phase = corev1.PodFailed; return p }()},
			bootstrap.ErrPodMismatch,
		},
		{
			"a token of a pod no node was given is refused",
			fakeReviews{status: reviewOf(proxyUser, boundExtra)},
			fakePods{pod: func() *corev1.Pod { p := livePod.DeepCopy(); p.Spec.NodeName = ""; return p }()},
			bootstrap.ErrPodMismatch,
		},
		{
			"a token of a pending pod on a node passes",
			fakeReviews{status: reviewOf(proxyUser, boundExtra)},
			fakePods{pod: func() *corev1.Pod { p := livePod.DeepCopy(); p.Status.Phase = corev1.PodPending; return p }()},
			nil,
		},
		{
			"a pod lookup the API server cannot answer is unavailable",
			fakeReviews{status: reviewOf(proxyUser, boundExtra)},
			fakePods{err: apierrors.NewServiceUnavailable("down")},
			bootstrap.ErrUnavailable,
		},
		{
			"a bound token of a live matching pod passes",
			fakeReviews{status: reviewOf(proxyUser, boundExtra)},
			fakePods{pod: livePod},
			nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := NewAuthenticator(&tt.reviews, &tt.pods, logr.Discard())
			p, err := a.Authenticate(t.Context(), "secret-token")
			if tt.want == nil {
				if err != nil || p.PodName != "gw-0" || p.Namespace != "prod" || p.ServiceAccount != "gw-coxswain" {
					t.Fatalf("Authenticate = %+v, %v; want prod/gw-coxswain on gw-0", p, err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Authenticate = %+v, %v; want %v", p, err, tt.want)
			}
			if errors.Is(err, bootstrap.ErrPodMismatch) {
				// The token authenticated: the refusal names whose it was.
				if p.Namespace != "prod" || p.ServiceAccount != "gw-coxswain" {
					t.Fatalf("a PodMismatch refusal named %+v, want prod/gw-coxswain", p)
				}
				return
			}
			if p != (bootstrap.Principal{}) {
				t.Fatalf("a refusal returned the principal %+v", p)
			}
		})
	}
}
