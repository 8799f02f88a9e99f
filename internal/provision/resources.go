package provision

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The proxy container's memory when neither the defaults nor the parameters set a limit: a
// proxy without a limit grows until its node is out of memory.
const (
	defaultMemoryLimit   = "1Gi"
	defaultMemoryRequest = "128Mi"
	// goMemLimitPercent is GOMEMLIMIT's share of the container's memory limit: the runtime
	// collects harder near it, and the proxy sheds load above 90% of it (its memory
	// watermark), well before the kernel kills the container.
	goMemLimitPercent = 90
)

// resources are the parameters', else the defaults', with a memory limit (and, when the limit
// is the default, a memory request, which would otherwise default to the limit).
func (m Model) resources() corev1.ResourceRequirements {
	r := *m.Defaults.Resources.DeepCopy()
	if m.Params.Resources != nil {
		r = *m.Params.Resources.DeepCopy()
	}
	if _, ok := r.Limits[corev1.ResourceMemory]; ok {
		return r
	}
	if r.Limits == nil {
		r.Limits = corev1.ResourceList{}
	}
	r.Limits[corev1.ResourceMemory] = resource.MustParse(defaultMemoryLimit)
	if _, ok := r.Requests[corev1.ResourceMemory]; !ok {
		if r.Requests == nil {
			r.Requests = corev1.ResourceList{}
		}
		r.Requests[corev1.ResourceMemory] = resource.MustParse(defaultMemoryRequest)
	}
	return r
}

// goMemLimit is the GOMEMLIMIT of a proxy container with resources r: goMemLimitPercent of its
// memory limit, in MiB.
func goMemLimit(r corev1.ResourceRequirements) corev1.EnvVar {
	limit := r.Limits[corev1.ResourceMemory]
	mib := limit.Value() / 100 * goMemLimitPercent >> 20
	return corev1.EnvVar{Name: "GOMEMLIMIT", Value: strconv.FormatInt(max(mib, 1), 10) + "MiB"}
}
