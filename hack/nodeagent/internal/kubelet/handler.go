package kubelet

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"coxswain.dev/coxswain/hack/nodeagent/internal/containerlog"
	"coxswain.dev/coxswain/hack/nodeagent/internal/pod"
)

func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = fmt.Fprint(w, "ok") })
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", s.containerLogs)
	return s.authenticate(mux)
}

// authenticate lets through requests with a client certificate of the CA that a
// SubjectAccessReview allows to use the Node's proxy subresource (healthz needs only the
// certificate); it answers 401 without a certificate and 403 when the review says no.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		if r.URL.Path == "/healthz" {
			next.ServeHTTP(w, r)
			return
		}
		leaf := r.TLS.VerifiedChains[0][0]
		user, groups := leaf.Subject.CommonName, leaf.Subject.Organization
		review, err := s.client.AuthorizationV1().SubjectAccessReviews().Create(r.Context(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: groups,
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Verb: "get", Resource: "nodes", Subresource: "proxy", Name: s.cfg.Node,
				},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			s.log.Error(err, "Authorising a kubelet API request failed", "user", user)
			http.Error(w, "authorization failed", http.StatusInternalServerError)
			return
		}
		if !review.Status.Allowed {
			s.log.V(1).Info("Refused a kubelet API request", "user", user, "path", r.URL.Path)
			http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=get, resource=nodes, subresource=proxy)", user), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// containerLogs serves a container's log as the kubelet does, with the query parameters the
// API server forwards from pods/log.
func (s *Server) containerLogs(w http.ResponseWriter, r *http.Request) {
	q, err := parseLogQuery(r.URL.Query().Get, s.now())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	path, live, err := s.cfg.Logs.LogFile(r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container"), q.previous)
	switch {
	case errors.Is(err, pod.ErrNoPod):
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if err := containerlog.Copy(r.Context(), w, path, q.Options, live); err != nil && r.Context().Err() == nil {
		s.log.Error(err, "Serving a container log failed", "path", r.URL.Path)
	}
}

type logQuery struct {
	containerlog.Options
	previous bool
}

// parseLogQuery reads follow, previous, timestamps, sinceSeconds, sinceTime, tailLines and
// limitBytes; get is the query's Get.
func parseLogQuery(get func(string) string, now time.Time) (logQuery, error) {
	q := logQuery{Options: containerlog.Options{Tail: -1}}
	var errs []error
	flag := func(name string) bool {
		v := get(name)
		if v == "" {
			return false
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		return b
	}
	number := func(name string) (int64, bool) {
		v := get(name)
		if v == "" {
			return 0, false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err == nil && n < 0 {
			err = errors.New("must not be negative")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		return n, err == nil
	}
	q.Follow, q.previous, q.Timestamps = flag("follow"), flag("previous"), flag("timestamps")
	if n, ok := number("tailLines"); ok {
		q.Tail = n
	}
	if n, ok := number("limitBytes"); ok {
		q.LimitBytes = n
	}
	if n, ok := number("sinceSeconds"); ok {
		q.Since = now.Add(-time.Duration(n) * time.Second)
	}
	if v := get("sinceTime"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			errs = append(errs, fmt.Errorf("sinceTime: %w", err))
		}
		if !q.Since.IsZero() {
			errs = append(errs, errors.New("sinceSeconds and sinceTime are exclusive"))
		}
		q.Since = t
	}
	return q, errors.Join(errs...)
}
