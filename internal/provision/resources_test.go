package provision

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"coxswain.dev/coxswain/api/v1alpha1"
)

// Tests that a proxy container always has a memory limit, the parameters' or the default one
// with a request of its own, and a GOMEMLIMIT of 90% of that limit.
func TestProxyMemoryLimit(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name                       string
		params                     *corev1.ResourceRequirements
		limit, request, goMemLimit string
	}{
		{"no resources get the default limit and request", nil, "1Gi", "128Mi", "921MiB"},
		{"a limit of the parameters is kept", &corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")},
		}, "2Gi", "", "1843MiB"},
		{"a request alone keeps its request under the default limit", &corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
		}, "1Gi", "256Mi", "921MiB"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := Model{Params: v1alpha1.CoxswainGatewayParametersSpec{Resources: c.params}}
			r := m.resources()
			limit, request := r.Limits[corev1.ResourceMemory], r.Requests[corev1.ResourceMemory]
			if limit.String() != c.limit || c.request != "" && request.String() != c.request {
				t.Errorf("limit %s request %s, want %s and %q", limit.String(), request.String(), c.limit, c.request)
			}
			if got := goMemLimit(r); got.Name != "GOMEMLIMIT" || got.Value != c.goMemLimit {
				t.Errorf("%s=%s, want GOMEMLIMIT=%s", got.Name, got.Value, c.goMemLimit)
			}
		})
	}
}
