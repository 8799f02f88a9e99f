package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/test/e2e"
)

// EnvSwitch must be "1" for the suite to run: `make test-e2e` sets it when it runs the test
// binary inside hack/cluster.sh. A KUBECONFIG alone is not enough: it may name a real cluster.
const EnvSwitch = "COXSWAIN_E2E_CLUSTER"

// The suite's objects.
const (
	namespace  = "coxswain-e2e"
	className  = "coxswain-e2e"
	paramsName = "dedicated"
	gatewayA   = "web-a"
	gatewayB   = "web-b"
	hostA      = "a.example.com"
	hostB      = "b.example.com"
	echoName   = "echo"
	// listenerPort is the Gateways' listener port; their proxies' health port is then 8081.
	listenerPort = 8080
	// defaultEchoImage is the local cluster's sample backend (hack/nodeagent/cmd/echo).
	defaultEchoImage = "coxswain.dev/echo:dev"
	controllerName   = "coxswain-controller"
	configName       = "coxswain"
)

// Labels of the operator's pods and of the shared pool's.
var (
	controllerLabels = client.MatchingLabels{"app.kubernetes.io/name": "coxswain", "app.kubernetes.io/component": "controller"}
	sharedPoolLabels = client.MatchingLabels{"app.kubernetes.io/name": "coxswain", "app.kubernetes.io/component": "shared-proxy"}
)

// suite holds the admin client of the cluster under test.
type suite struct {
	client client.WithWatch
}

// newSuite skips the test outside the local cluster and returns a suite with an admin client.
func newSuite(t *testing.T) *suite {
	t.Helper()
	if os.Getenv(EnvSwitch) != "1" {
		t.Skip(EnvSwitch + " is not 1: this suite runs on the local cluster only, through `make test-e2e` " +
			"(hack/cluster.sh run -- bin/e2e-cluster.test)")
	}
	kubeconfig := os.Getenv("KUBECONFIG")
	if kubeconfig == "" {
		t.Fatal(EnvSwitch + "=1 but KUBECONFIG is not set: run the suite with hack/cluster.sh run, which sets it")
	}
	if err := noRouteOut(t.Context()); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("kubeconfig %s: %v", kubeconfig, err)
	}
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), v1alpha1.AddToScheme(scheme), gwapiv1.Install(scheme)); err != nil {
		t.Fatal(err)
	}
	cl, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return &suite{client: cl}
}

// noRouteOut refuses to run where a packet to a pod or load-balancer address could leave the
// machine: the cluster's network namespace has no default route.
func noRouteOut(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, "ip", "route", "show", "default").CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip route show default: %w: %s", err, out)
	}
	if strings.TrimSpace(string(out)) != "" {
		return fmt.Errorf("refusing to run: this network namespace has a default route (%s); run the suite through hack/cluster.sh run",
			strings.TrimSpace(string(out)))
	}
	return nil
}

// ensure creates obj, or leaves the existing object of its name as it is.
func (s *suite) ensure(ctx context.Context, obj client.Object) error {
	if err := s.client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create %T %s/%s: %w", obj, obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// setUp creates the namespace, the echo backend, the GatewayClass and the parameters that make
// a Gateway dedicated, and sets the SVID lifetime to its minimum so rotations happen within
// the run. Gateways come with the scenarios.
func (s *suite) setUp(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	image := os.Getenv("COXSWAIN_E2E_ECHO_IMAGE")
	if image == "" {
		image = defaultEchoImage
	}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		echoDeployment(image),
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: echoName},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": echoName},
				Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
			},
		},
		e2e.GatewayClass(className),
		&v1alpha1.CoxswainGatewayParameters{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: paramsName},
			Spec:       v1alpha1.CoxswainGatewayParametersSpec{Replicas: ptr.To[int32](1)},
		},
	}
	for _, obj := range objs {
		if err := s.ensure(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.setSVIDTTL(ctx, wellknown.MinSVIDTTL); err != nil {
		t.Fatal(err)
	}
	if err := e2e.Poll(ctx, 2*time.Minute, 250*time.Millisecond, s.echoReady); err != nil {
		t.Fatalf("echo backend: %v", err)
	}
}

func echoDeployment(image string) *appsv1.Deployment {
	labels := map[string]string{"app": echoName}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: echoName},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: echoName, Image: image, Args: []string{"--listen=:8080"},
					Env: []corev1.EnvVar{
						{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
						{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
					},
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
						HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")},
					}, PeriodSeconds: 1},
				}}},
			},
		},
	}
}

func (s *suite) echoReady(ctx context.Context) error {
	var d appsv1.Deployment
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: echoName}, &d); err != nil {
		return err
	}
	if d.Status.ReadyReplicas < 1 {
		return fmt.Errorf("deployment %s/%s: %d ready replicas", namespace, echoName, d.Status.ReadyReplicas)
	}
	return nil
}

// setSVIDTTL sets spec.discovery.svidTTL of the operator's CoxswainConfig, creating it when
// there is none, and waits until the operator reports it in force.
func (s *suite) setSVIDTTL(ctx context.Context, ttl time.Duration) error {
	key := client.ObjectKey{Namespace: wellknown.InstallNamespace, Name: configName}
	var cfg v1alpha1.CoxswainConfig
	err := s.client.Get(ctx, key, &cfg)
	switch {
	case apierrors.IsNotFound(err):
		cfg = v1alpha1.CoxswainConfig{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		cfg.Spec.Discovery = &v1alpha1.DiscoverySpec{SVIDTTL: &metav1.Duration{Duration: ttl}}
		err = s.client.Create(ctx, &cfg)
	case err == nil:
		patch := client.MergeFrom(cfg.DeepCopy())
		if cfg.Spec.Discovery == nil {
			cfg.Spec.Discovery = &v1alpha1.DiscoverySpec{}
		}
		cfg.Spec.Discovery.SVIDTTL = &metav1.Duration{Duration: ttl}
		err = s.client.Patch(ctx, &cfg, patch)
	}
	if err != nil {
		return fmt.Errorf("set svidTTL of CoxswainConfig %s: %w", key, err)
	}
	return e2e.Poll(ctx, time.Minute, 250*time.Millisecond, func(ctx context.Context) error {
		if err := s.client.Get(ctx, key, &cfg); err != nil {
			return err
		}
		if e := cfg.Status.Effective; e == nil || e.SVIDTTL.Duration != ttl {
			return fmt.Errorf("CoxswainConfig %s status.effective: %+v, want svidTTL %s", key, e, ttl)
		}
		return nil
	})
}

// allowTracingEndpoint lists endpoint in spec.proxy.allowedTracingEndpoints of the operator's
// CoxswainConfig, creating it when there is none: a Gateway's own parameters trace only to an
// endpoint the operator allows. A settings change reconciles every Gateway again.
func (s *suite) allowTracingEndpoint(ctx context.Context, endpoint string) error {
	key := client.ObjectKey{Namespace: wellknown.InstallNamespace, Name: configName}
	var cfg v1alpha1.CoxswainConfig
	err := s.client.Get(ctx, key, &cfg)
	switch {
	case apierrors.IsNotFound(err):
		cfg = v1alpha1.CoxswainConfig{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		cfg.Spec.Proxy = &v1alpha1.ProxyDefaults{AllowedTracingEndpoints: []string{endpoint}}
		err = s.client.Create(ctx, &cfg)
	case err == nil:
		patch := client.MergeFrom(cfg.DeepCopy())
		if cfg.Spec.Proxy == nil {
			cfg.Spec.Proxy = &v1alpha1.ProxyDefaults{}
		}
		cfg.Spec.Proxy.AllowedTracingEndpoints = []string{endpoint}
		err = s.client.Patch(ctx, &cfg, patch)
	}
	if err != nil {
		return fmt.Errorf("allow tracing endpoint %s in CoxswainConfig %s: %w", endpoint, key, err)
	}
	return nil
}

// Scenario names: each is a subtest of TestCluster.
const (
	dedicatedServes   = "a dedicated Gateway's proxy pod starts NotReady, bootstraps with its projected token, turns Ready and serves its route"
	programmed        = "the Gateway is Programmed with its load-balancer address, as kubectl get gateway shows"
	programmedServed  = "kubectl wait --for=condition=Programmed returns only once traffic follows the change"
	controllerOutage  = "with every controller pod deleted, proxies serve Degraded without failing a request until the controller is back"
	controllerReplace = "with every controller pod deleted and replaced by its Deployment, proxies serve Degraded without failing a request until the new pods serve"
	foreignSARefused  = "a proxy pod of a ServiceAccount off the allowlist is refused at bootstrap with a BootstrapRejected event"
	foreignScope      = "a proxy with Gateway A's token asking for Gateway B's scope is refused that scope"
	rotationUnderLoad = "SVIDs rotate twice under load without failing a request"
	requestTraced     = "a request with a client's traceparent through a traced dedicated proxy reaches the backend under the proxy's span, which the collector receives"
	rollouts          = "a rolling restart of the shared pool and an operator rollout of a dedicated proxy, under HTTP/1.1 and h2c load, fail no request"
)

// TestCluster runs the scenarios in order on the cluster. Each one creates what it needs and
// does not exist yet (Gateway A and its route, Gateway B), so any of them runs alone with
// -test.run; run in order, later ones reuse the Gateways of earlier ones.
func TestCluster(t *testing.T) {
	s := newSuite(t)
	var d appsv1.Deployment
	if err := s.client.Get(t.Context(), client.ObjectKey{Namespace: wellknown.InstallNamespace, Name: controllerName}, &d); err != nil {
		t.Fatal(err)
	}
	if mode, _ := caSettings(&d); strings.EqualFold(mode, string(v1alpha1.CAModeExternal)) {
		t.Skip("the operator runs in External CA mode: TestExternalCA is the test of that cluster")
	}
	start := time.Now()
	s.setUp(t)
	t.Logf("Set up the namespace, echo backend, GatewayClass, parameters and a %s SVID lifetime in %s",
		wellknown.MinSVIDTTL, time.Since(start).Round(100*time.Millisecond))
	for _, sc := range []struct {
		name string
		run  func(*testing.T)
	}{
		{dedicatedServes, s.dedicatedProxyServes},
		{programmed, s.gatewayProgrammed},
		{programmedServed, s.programmedMeansServed},
		{controllerOutage, s.controllerOutage},
		{controllerReplace, s.controllerPodsReplaced},
		{foreignSARefused, s.foreignServiceAccountRefused},
		{foreignScope, s.foreignScopeRefused},
		{rotationUnderLoad, s.rotationUnderLoad},
		{requestTraced, s.requestTraced},
		{rollouts, s.rolloutsUnderLoad},
	} {
		t.Run(sc.name, func(t *testing.T) {
			begin := time.Now()
			sc.run(t)
			t.Logf("Took %s", time.Since(begin).Round(100*time.Millisecond))
		})
	}
	t.Logf("Suite took %s", time.Since(start).Round(100*time.Millisecond))
}
