package provision_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/golden"
	"coxswain.dev/coxswain/internal/provision"
)

// Tests that every object every golden case renders has a name, labels, selectors and
// annotations that Kubernetes accepts, as the API server validates them: a Service name is a
// DNS-1035 label, the other names DNS-1123 subdomains (and all of ours also DNS-1035 labels of at
// most 63 characters, so a pod's hostname and a SPIFFE ID hold them), label values of at most 63
// characters; and that no two Gateways of a case, however long and alike their names, are given
// the same object.
func TestRenderedObjectsFitKubernetesLimits(t *testing.T) {
	for _, in := range golden.Inputs(t) {
		t.Run(golden.Name(in), func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(in) //nolint:gosec // a test fixture path from Glob
			if err != nil {
				t.Fatal(err)
			}
			owners := map[string]string{}
			for _, r := range renderObjects(t, data) {
				for _, obj := range r.objects {
					key := fmt.Sprintf("%T %s/%s", obj, obj.GetNamespace(), obj.GetName())
					if other, ok := owners[key]; ok {
						t.Errorf("%s is rendered for both %s and %s", key, other, r.gateway)
					}
					owners[key] = r.gateway
					for _, msg := range objectProblems(obj) {
						t.Errorf("%s of %s: %s", key, r.gateway, msg)
					}
				}
			}
		})
	}
}

// Tests that objectProblems finds what the API server would refuse, so that the test above can
// fail: names and label values one character too long, a capital letter, a label value ending
// with a dash.
func TestObjectProblemsFindsWhatTheAPIServerRefuses(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("s", wellknown.MaxNameLength+1)
	meta := func(name string, labels map[string]string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: labels}
	}
	tests := []struct {
		name string
		obj  provision.Object
	}{
		{"a Service name of 64 characters", &corev1.Service{ObjectMeta: meta(long, nil)}},
		{"a ServiceAccount name of 64 characters, which the API server takes but a proxy name may not be", &corev1.ServiceAccount{ObjectMeta: meta(long, nil)}},
		{"a ServiceAccount name with a capital letter", &corev1.ServiceAccount{ObjectMeta: meta("Proxy", nil)}},
		{"a label value of 64 characters", &corev1.ServiceAccount{ObjectMeta: meta("proxy", map[string]string{provision.GatewayNameLabel: long})}},
		{"a label value ending with a dash", &corev1.Service{ObjectMeta: meta("proxy", map[string]string{provision.GatewayNameLabel: "gateway-"})}},
		{"a pod template label value of 64 characters", &appsv1.Deployment{
			ObjectMeta: meta("proxy", nil),
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{provision.InstanceLabel: "proxy"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{provision.GatewayNameLabel: long}}},
			},
		}},
		{"a selector label value of 64 characters", &appsv1.Deployment{
			ObjectMeta: meta("proxy", nil),
			Spec:       appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{provision.InstanceLabel: long}}},
		}},
		{"a Service selector label value of 64 characters", &corev1.Service{
			ObjectMeta: meta("proxy", nil),
			Spec:       corev1.ServiceSpec{Selector: map[string]string{provision.InstanceLabel: long}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := objectProblems(tt.obj); len(got) == 0 {
				t.Error("no problem found")
			}
		})
	}
	ok := &corev1.ServiceAccount{ObjectMeta: meta(strings.Repeat("s", wellknown.MaxNameLength), map[string]string{provision.GatewayNameLabel: strings.Repeat("g", 63)})}
	if got := objectProblems(ok); len(got) > 0 {
		t.Errorf("a name and a label value of 63 characters: %v", got)
	}
}

// objectProblems returns what the API server would refuse in obj's metadata and in the names
// and labels inside it, and any name of ours that is not a DNS-1035 label.
func objectProblems(obj provision.Object) []string {
	var out []string
	add := func(what string, msgs ...string) {
		for _, m := range msgs {
			out = append(out, what+": "+m)
		}
	}
	name := obj.GetName()
	if _, ok := obj.(*corev1.Service); ok {
		add("name", validation.IsDNS1035Label(name)...)
	} else {
		add("name", validation.IsDNS1123Subdomain(name)...)
	}
	if len(name) > wellknown.MaxNameLength || len(validation.IsDNS1035Label(name)) > 0 {
		add("name", fmt.Sprintf("%q is not a DNS-1035 label of at most %d characters", name, wellknown.MaxNameLength))
	}
	add("namespace", validation.IsDNS1123Label(obj.GetNamespace())...)
	meta := field.NewPath("metadata")
	add("labels", errorStrings(metav1validation.ValidateLabels(obj.GetLabels(), meta.Child("labels")))...)
	add("annotations", errorStrings(apivalidation.ValidateAnnotations(obj.GetAnnotations(), meta.Child("annotations")))...)
	for _, ref := range obj.GetOwnerReferences() {
		add("owner", validation.IsDNS1123Subdomain(ref.Name)...)
	}
	switch o := obj.(type) {
	case *appsv1.Deployment:
		spec := field.NewPath("spec")
		add("selector", errorStrings(metav1validation.ValidateLabelSelector(o.Spec.Selector, metav1validation.LabelSelectorValidationOptions{}, spec.Child("selector")))...)
		add("pod labels", errorStrings(metav1validation.ValidateLabels(o.Spec.Template.Labels, spec.Child("template", "metadata", "labels")))...)
		add("pod annotations", errorStrings(apivalidation.ValidateAnnotations(o.Spec.Template.Annotations, spec.Child("template", "metadata", "annotations")))...)
		out = append(out, podProblems(o.Spec.Template.Spec)...)
	case *corev1.Service:
		add("selector", errorStrings(metav1validation.ValidateLabels(o.Spec.Selector, field.NewPath("spec", "selector")))...)
		for _, p := range o.Spec.Ports {
			add("port name", validation.IsValidPortName(p.Name)...)
		}
	}
	return out
}

// podProblems returns what the API server would refuse in the names of a pod spec.
func podProblems(pod corev1.PodSpec) []string {
	var out []string
	add := func(what string, msgs ...string) {
		for _, m := range msgs {
			out = append(out, what+": "+m)
		}
	}
	add("service account", validation.IsDNS1123Subdomain(pod.ServiceAccountName)...)
	for _, v := range pod.Volumes {
		add("volume", validation.IsDNS1123Label(v.Name)...)
	}
	for _, c := range pod.Containers {
		add("container", validation.IsDNS1123Label(c.Name)...)
		for _, p := range c.Ports {
			add("container port", validation.IsValidPortName(p.Name)...)
		}
	}
	return out
}

func errorStrings(errs field.ErrorList) []string {
	out := make([]string, 0, len(errs))
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}
