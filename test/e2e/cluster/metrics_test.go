package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// metricsScraper is the suite's ServiceAccount bound to coxswain-metrics-reader: the controller
// serves its metrics over HTTPS to tokens allowed get on /metrics only.
const metricsScraper = "e2e-metrics-scraper"

// controllerMetricsPort is the controller's HTTPS metrics port (config/manager).
const controllerMetricsPort = "8443"

// metricsToken returns a token of the suite's scraper ServiceAccount, creating it and its
// binding to coxswain-metrics-reader first.
func (s *suite) metricsToken(ctx context.Context) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: metricsScraper}}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: metricsScraper},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "coxswain-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: metricsScraper}},
	}
	if err := s.ensure(ctx, sa); err != nil {
		return "", err
	}
	if err := s.ensure(ctx, binding); err != nil {
		return "", err
	}
	req := &authenticationv1.TokenRequest{}
	if err := s.client.SubResource("token").Create(ctx, sa, req); err != nil {
		return "", fmt.Errorf("token of %s: %w", metricsScraper, err)
	}
	return req.Status.Token, nil
}

// controllerMetrics returns the metrics of a controller pod, read over HTTPS with token.
func controllerMetrics(ctx context.Context, pod *corev1.Pod, token string) ([]byte, error) {
	url := "https://" + net.JoinHostPort(pod.Status.PodIP, controllerMetricsPort) + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		Proxy: nil,
		// The controller serves a self-signed certificate made at its start.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, //nolint:gosec // see above
	}}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close() //nolint:errcheck // read to the end below
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	return body, nil
}
