package identity

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"coxswain.dev/coxswain/discovery/server/bootstrap"
	"coxswain.dev/coxswain/discovery/spiffe"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups="",resources=pods,verbs=get

// The user.extra keys of a review of a token bound to a pod.
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
)

// Authenticator implements bootstrap.Authenticator with the TokenReview API. A token passes when
// the API server authenticates it for the coxswain-discovery audience and says so in the review's
// audiences, names a ServiceAccount, and is bound to a pod that exists now with the bound UID,
// runs as that ServiceAccount, is scheduled to a node, has not finished and is not being deleted.
// A token bound to no pod passes only while AllowUnbound says so. Errors never contain the token.
type Authenticator struct {
	reviews client.Writer
	pods    client.Reader
	log     logr.Logger
	// unbound reports whether tokens bound to no pod may pass; nil refuses them.
	unbound func() bool
}

// NewAuthenticator returns an Authenticator that creates TokenReviews with reviews and reads
// bound pods with pods. Both must talk to the API server directly: pass the manager's client
// (its writes are never cached) and its API reader, not the cache, since a pod deleted a moment
// ago must count as deleted.
func NewAuthenticator(reviews client.Writer, pods client.Reader, log logr.Logger) *Authenticator {
	return &Authenticator{reviews: reviews, pods: pods, log: log}
}

var _ bootstrap.Authenticator = (*Authenticator)(nil)

// AllowUnbound lets tokens bound to no pod pass while allowed returns true (the setting
// discovery.allowUnboundTokens); without it they are refused. Whoever may request tokens for a
// ServiceAccount (TokenRequest) could otherwise obtain its SVID without running a pod. Call it
// before the first Authenticate; it returns a.
func (a *Authenticator) AllowUnbound(allowed func() bool) *Authenticator {
	a.unbound = allowed
	return a
}

// Authenticate reviews token and returns the ServiceAccount, and the pod, it authenticates.
func (a *Authenticator) Authenticate(ctx context.Context, token string) (bootstrap.Principal, error) {
	if token == "" {
		return bootstrap.Principal{}, fmt.Errorf("%w: empty token", bootstrap.ErrUnauthenticated)
	}
	st, err := a.review(ctx, token)
	if err != nil {
		return bootstrap.Principal{}, err
	}
	p, err := principalOf(st)
	if err != nil {
		return bootstrap.Principal{}, err
	}
	if p.PodName == "" {
		if a.unbound != nil && a.unbound() {
			return p, nil
		}
		return p, fmt.Errorf("%w: the token of %s/%s is bound to no pod (discovery.allowUnboundTokens is off)",
			bootstrap.ErrPodMismatch, p.Namespace, p.ServiceAccount)
	}
	if err := a.checkPod(ctx, p); err != nil {
		if errors.Is(err, bootstrap.ErrPodMismatch) {
			return p, err
		}
		return bootstrap.Principal{}, err
	}
	return p, nil
}

// review asks the API server about token for our audience and requires it authenticated for it.
func (a *Authenticator) review(ctx context.Context, token string) (authnv1.TokenReviewStatus, error) {
	tr := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{
		Token:     token,
		Audiences: []string{wellknown.TokenAudience},
	}}
	if err := a.reviews.Create(ctx, tr); err != nil {
		return authnv1.TokenReviewStatus{}, classify("review token", err, bootstrap.ErrUnauthenticated)
	}
	st := tr.Status
	if st.Error != "" {
		// The review's error is the authenticators' account of the token; it does not echo it.
		a.log.V(1).Info("Token review refused the token", "detail", st.Error)
	}
	if !st.Authenticated {
		return st, fmt.Errorf("%w: the API server did not authenticate the token", bootstrap.ErrUnauthenticated)
	}
	if !slices.Contains(st.Audiences, wellknown.TokenAudience) {
		return st, fmt.Errorf("%w: token not valid for audience %s (review audiences %q)",
			bootstrap.ErrUnauthenticated, wellknown.TokenAudience, st.Audiences)
	}
	return st, nil
}

// principalOf reads the ServiceAccount and the bound pod, if any, from an authenticated review.
func principalOf(st authnv1.TokenReviewStatus) (bootstrap.Principal, error) {
	ns, sa, err := spiffe.ServiceAccountFromUsername(st.User.Username)
	if err != nil {
		return bootstrap.Principal{}, fmt.Errorf("%w: %w", bootstrap.ErrUnauthenticated, err)
	}
	names, uids := st.User.Extra[extraPodName], st.User.Extra[extraPodUID]
	p := bootstrap.Principal{Namespace: ns, ServiceAccount: sa}
	switch {
	case len(names) == 0 && len(uids) == 0:
		return p, nil
	case len(names) != 1 || len(uids) != 1 || names[0] == "" || uids[0] == "":
		return bootstrap.Principal{}, fmt.Errorf("%w: malformed pod binding in the review of %s/%s",
			bootstrap.ErrUnauthenticated, ns, sa)
	}
	p.PodName, p.PodUID = names[0], uids[0]
	return p, nil
}

// classify wraps err in ErrUnavailable when the API server could not answer (no response, 5xx,
// throttling) and in otherwise when it answered with a refusal. A refusal keeps only the status
// reason and code: the response is never quoted.
func classify(action string, err error, otherwise error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w: %w", action, bootstrap.ErrUnavailable, err)
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return fmt.Errorf("%s: %w: %w", action, bootstrap.ErrUnavailable, err)
	}
	code := st.Status().Code
	if code >= http.StatusInternalServerError || code == http.StatusTooManyRequests || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) {
		return fmt.Errorf("%s: %w: API server answered %d %s", action, bootstrap.ErrUnavailable, code, st.Status().Reason)
	}
	return fmt.Errorf("%s: %w: API server answered %d %s", action, otherwise, code, st.Status().Reason)
}
