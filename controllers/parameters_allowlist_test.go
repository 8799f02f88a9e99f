package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/graph"
)

// proxyDeployment returns the dedicated proxy Deployment of Gateway ns/gateway of class.
func proxyDeployment(h *gatewayAPI, ns, gateway, class string) (*appsv1.Deployment, error) {
	var d appsv1.Deployment
	err := h.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: wellknown.DedicatedProxyName(gateway, class)}, &d)
	return &d, err
}

// Tests that the tracing endpoint of a Gateway's own parameters that the allowed endpoints do
// not admit (here the cloud metadata address, through a prefix) is not used: the proxy traces
// as the operator's default says, and a Warning event says why.
func TestTracingEndpointOfAGatewaysOwnParametersNeedsTheAllowlist(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, ns)
	defaults := testDefaults
	defaults.Tracing = &v1alpha1.Tracing{Endpoint: "https://otel.observability.svc:4317"}
	defaults.AllowedTracingEndpoints = []string{"http://*"}
	r := startProvisionWith(t, graph.Options{Namespace: ns}, defaults)
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	h.create(&v1alpha1.CoxswainGatewayParameters{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "params"},
		Spec:       v1alpha1.CoxswainGatewayParametersSpec{Tracing: &v1alpha1.Tracing{Endpoint: "http://169.254.169.254:80"}},
	})
	h.create(dedicatedGateway(ns, "edge", class))

	eventually(t, "a TracingEndpointNotAllowed event", warningEvent(h, ns, "edge", ReasonTracingEndpointNotAllowed))
	if n := value(t, r.Metrics.tracingEndpoints); n < 1 {
		t.Errorf("coxswain_provision_tracing_endpoints_refused_total = %v, want at least 1", n)
	}
	eventually(t, "the proxy traces to the default endpoint", func() error {
		d, err := proxyDeployment(h, ns, "edge", class)
		if err != nil {
			return err
		}
		args := d.Spec.Template.Spec.Containers[0].Args
		if !slices.Contains(args, "--tracing-endpoint=https://otel.observability.svc:4317") || slices.ContainsFunc(args, func(a string) bool {
			return strings.Contains(a, "169.254")
		}) {
			return fmt.Errorf("args %q, want the default tracing endpoint only", args)
		}
		return nil
	})
}

// Tests that a toleration of the control-plane taint in a Gateway's parameters is left out of
// its proxy's pods, with a Warning event, and the other tolerations kept.
func TestControlPlaneTolerationOfParametersIsLeftOut(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, ns)
	r := startProvisionWith(t, graph.Options{Namespace: ns}, testDefaults)
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	edge := corev1.Toleration{Key: "edge", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	h.create(&v1alpha1.CoxswainGatewayParameters{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "params"},
		Spec: v1alpha1.CoxswainGatewayParametersSpec{Tolerations: []corev1.Toleration{
			{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
			edge,
		}},
	})
	h.create(dedicatedGateway(ns, "edge", class))

	eventually(t, "a TolerationNotAllowed event", warningEvent(h, ns, "edge", ReasonTolerationNotAllowed))
	if n := value(t, r.Metrics.tolerations); n < 1 {
		t.Errorf("coxswain_provision_tolerations_refused_total = %v, want at least 1", n)
	}
	eventually(t, "the proxy tolerates the edge taint only", func() error {
		d, err := proxyDeployment(h, ns, "edge", class)
		if err != nil {
			return err
		}
		if got := d.Spec.Template.Spec.Tolerations; len(got) != 1 || got[0] != edge {
			return fmt.Errorf("tolerations %+v, want only %+v", got, edge)
		}
		return nil
	})
}

// Tests that a proxy object the API server refuses (as the admission policy of config/admission
// refuses the controller's writes in a kube-* namespace) is reported on its Gateway by a Warning
// event carrying the refusal, not only in the controller's log.
func TestRefusedProxyWriteIsReportedOnTheGateway(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, true, ns)
	refuseDeployments(t, ns)
	startProvisionWith(t, graph.Options{Namespace: ns}, testDefaults)
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	h.create(&v1alpha1.CoxswainGatewayParameters{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "params"}})
	h.create(dedicatedGateway(ns, "edge", class))

	eventually(t, "a ProvisionRefused event naming the refusal", func() error {
		var list eventsv1.EventList
		if err := h.c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Reason == ReasonProvisionRefused && e.Regarding.Name == "edge" && e.Type == corev1.EventTypeWarning &&
				strings.Contains(e.Note, "no Deployment here") {
				return nil
			}
		}
		return fmt.Errorf("no %s event among %d", ReasonProvisionRefused, len(list.Items))
	})
}

// refuseDeployments makes the API server refuse every Deployment written in namespace ns, by a
// ValidatingAdmissionPolicy, until the test ends.
func refuseDeployments(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "refuse-deployments-" + ns},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
				}}},
			},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: "no Deployment here"}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	for _, obj := range []client.Object{policy, binding} {
		if err := k8sClient.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8sClient.Delete(ctx, obj) })
	}
	probe := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "probe"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "probe"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "probe"}}},
			},
		},
	}
	eventually(t, "the policy takes effect", func() error {
		err := k8sClient.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), "no Deployment here") {
			return fmt.Errorf("a Deployment was not refused by the policy: %w", err)
		}
		return nil
	})
}
