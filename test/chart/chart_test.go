package chart

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/internal/settings"
	"coxswain.dev/coxswain/internal/testenv"
)

// namespace is the release namespace the chart is rendered in: config/'s install namespace.
const namespace = "coxswain-system"

// mode is one install mode: a kustomize variant and the chart values that must render the same.
type mode struct {
	name   string
	dir    string // under config/
	values []string
}

var modes = []mode{
	{name: "auto", dir: "default"},
	{name: "external", dir: "overlays/external-ca", values: []string{"discovery.ca.mode=external"}},
	{name: "cert-manager", dir: "overlays/cert-manager", values: []string{"discovery.ca.mode=external", "discovery.ca.certManager.enabled=true"}},
	{name: "namespace-gate", dir: "overlays/namespace-gate", values: []string{"networkPolicy.namespaceGate=true"}},
	// config/default with the component config/components/monitoring.
	{name: "monitoring", dir: "overlays/monitoring", values: []string{"metrics.serviceMonitor.enabled=true", "metrics.podMonitor.enabled=true", "metrics.prometheusRule.enabled=true"}},
}

// TestChartRendersKustomizeObjects renders the chart and builds the kustomize variant of each
// mode and requires the same set of objects, field for field. The one difference allowed is
// that the chart sets every COXSWAIN_DISCOVERY_* variable of its values table explicitly: those
// config/ leaves out must give the operator exactly its built-in defaults.
func TestChartRendersKustomizeObjects(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			want := byKey(t, clusterScopedWithoutNamespace(kustomizeBuild(t, m.dir)))
			got := byKey(t, withoutKeepPolicy(t, helmTemplate(t, append([]string{"createNamespace=true"}, m.values...)...)))
			reconcileDefaultEnv(t, got, want)
			for _, k := range sortedKeys(want) {
				g, ok := got[k]
				if !ok {
					t.Errorf("the chart renders no %s", k)
					continue
				}
				if diff := cmp.Diff(want[k].Object, g.Object); diff != "" {
					t.Errorf("%s differs from kustomize's (-kustomize +chart):\n%s", k, diff)
				}
			}
			for _, k := range sortedKeys(got) {
				if _, ok := want[k]; !ok {
					t.Errorf("the chart renders %s, which kustomize does not", k)
				}
			}
		})
	}
}

// TestChartExternalModeHoldsNoSecretWrite checks the product page's statement: with Helm,
// external mode renders no Role that lets the controller create Secrets.
func TestChartExternalModeHoldsNoSecretWrite(t *testing.T) {
	for _, values := range [][]string{nil, {"discovery.ca.mode=external"}, {"discovery.ca.mode=External", "discovery.ca.certManager.enabled=true"}} {
		objs := helmTemplate(t, values...)
		external := len(values) > 0
		writes := secretWriters(objs)
		switch {
		case external && len(writes) > 0:
			t.Errorf("values %v: external mode renders %v, which grant Secret writes", values, writes)
		case !external && !slices.Equal(writes, []string{"Role/coxswain-manager"}):
			t.Errorf("values %v: auto mode renders Secret writes in %v, want only Role/coxswain-manager", values, writes)
		}
	}
}

// TestChartCertManagerMode checks that cert-manager mode renders the Issuer and the CA
// Certificate writing discovery.ca.secretName, and the other modes neither.
func TestChartCertManagerMode(t *testing.T) {
	objs := byKey(t, helmTemplate(t, "discovery.ca.mode=external", "discovery.ca.certManager.enabled=true", "discovery.ca.secretName=my-ca"))
	cert, ok := objs["cert-manager.io/v1/Certificate/"+namespace+"/coxswain-discovery-ca"]
	if !ok {
		t.Fatal("cert-manager mode renders no Certificate")
	}
	if got, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName"); got != "my-ca" {
		t.Errorf("the Certificate writes Secret %q, want discovery.ca.secretName my-ca", got)
	}
	if _, ok := objs["cert-manager.io/v1/Issuer/"+namespace+"/coxswain-discovery-selfsigned"]; !ok {
		t.Error("cert-manager mode renders no Issuer")
	}
	if env := controllerEnv(t, objs); env["COXSWAIN_DISCOVERY_CA_SECRET"] != "my-ca" || env["COXSWAIN_DISCOVERY_CA_MODE"] != "External" {
		t.Errorf("controller environment %v, want CA mode External and CA Secret my-ca", env)
	}
	for k := range byKey(t, helmTemplate(t)) {
		if strings.HasPrefix(k, "cert-manager.io/") {
			t.Errorf("auto mode renders %s", k)
		}
	}
}

// TestChartRefusesInconsistentValues tries the values the chart must refuse: its schema
// (values.schema.json) refuses unknown keys, wrong types and malformed values, its templates
// the combinations that make no sense.
func TestChartRefusesInconsistentValues(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   string
	}{
		{[]string{"discovery.ca.mode=manual"}, "at '/discovery/ca/mode'"},
		{[]string{"discovery.ca.certManager.enabled=true"}, "needs discovery.ca.mode=external"},
		{[]string{"discovery.ca.mod=external"}, "additional properties 'mod' not allowed"},
		{[]string{"discovery.port=0"}, "at '/discovery/port'"},
		{[]string{"discovery.bootstrapPort=http"}, "at '/discovery/bootstrapPort'"},
		{[]string{"discovery.svidTtl=1day"}, "at '/discovery/svidTtl'"},
		{[]string{"image.digest=latest"}, "at '/image/digest'"},
		{[]string{"proxy.image.digest=sha256:abc"}, "at '/proxy/image/digest'"},
		{[]string{"admissionPolicy.extraProxyImages={a'b}"}, "at '/admissionPolicy/extraProxyImages/0'"},
		{[]string{"controller.replicas=-1"}, "at '/controller/replicas'"},
		{[]string{"metrics.podMonitor.interval=30"}, "at '/metrics/podMonitor/interval'"},
		{[]string{"metrics.serviceMonitor.scheme=http"}, "additional properties 'scheme' not allowed"},
	} {
		_, stderr, err := runHelm(t, templateArgs(tc.values)...)
		if err == nil || !strings.Contains(stderr, tc.want) {
			t.Errorf("values %v: err %v, stderr %q; want a refusal saying %q", tc.values, err, stderr, tc.want)
		}
	}
}

// TestChartRefusesAKubeNamespaceUnderThePolicy checks that the chart refuses a release
// namespace whose name starts with kube- while it installs the admission policy, which refuses
// the controller every write there (the shared pool's Services, the trust bundle), and renders
// one without the policy.
func TestChartRefusesAKubeNamespaceUnderThePolicy(t *testing.T) {
	args := templateArgs(nil)
	args[slices.Index(args, namespace)] = "kube-system"
	_, stderr, err := runHelm(t, args...)
	if want := "admission policy refuses the controller every write in kube-system"; err == nil || !strings.Contains(stderr, want) {
		t.Errorf("release namespace kube-system: err %v, stderr %q; want a refusal saying %q", err, stderr, want)
	}
	if _, stderr, err := runHelm(t, append(args, "--set", "admissionPolicy.enabled=false")...); err != nil {
		t.Errorf("release namespace kube-system without the policy: %v\n%s", err, stderr)
	}
}

// TestChartGatewayAPICRDsOptional checks that gatewayAPI.installCRDs=false leaves out every
// Gateway API object (CRDs and their safe-upgrades policy) and keeps ours.
func TestChartGatewayAPICRDsOptional(t *testing.T) {
	with, without := byKey(t, helmTemplate(t)), byKey(t, helmTemplate(t, "gatewayAPI.installCRDs=false"))
	var dropped []string
	for k := range with {
		if _, ok := without[k]; !ok {
			dropped = append(dropped, k)
		}
	}
	if len(dropped) == 0 {
		t.Fatal("gatewayAPI.installCRDs=false leaves every object in")
	}
	for _, k := range dropped {
		if !strings.Contains(k, "gateway.networking.k8s.io") {
			t.Errorf("gatewayAPI.installCRDs=false drops %s, which is not the Gateway API's", k)
		}
	}
	for _, crd := range []string{"coxswainconfigs", "coxswaingatewayparameters"} {
		if _, ok := without["apiextensions.k8s.io/v1/CustomResourceDefinition//"+crd+".gateway.coxswain.dev"]; !ok {
			t.Errorf("gatewayAPI.installCRDs=false drops our CRD %s", crd)
		}
	}
	for k := range without {
		if strings.HasSuffix(k, ".gateway.networking.k8s.io") {
			t.Errorf("gatewayAPI.installCRDs=false still renders %s", k)
		}
	}
}

// TestChartValuesReachObjects sets every value of the product page's table, the images (pinned
// by digest), replicas and resources, and checks each lands where it means something.
func TestChartValuesReachObjects(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	objs := byKey(t, helmTemplate(t,
		"discovery.ca.secretName=other-ca", "discovery.svidTtl=2h", "discovery.trustDomain=example.org",
		"discovery.port=7001", "discovery.bootstrapPort=7002",
		"image.repository=registry.example/coxswain", "image.tag=v9.9.9", "image.digest="+digest,
		"proxy.image.repository=registry.example/coxswain-proxy", "proxy.image.tag=v9.9.9", "proxy.image.digest="+digest,
		"controller.replicas=3", "proxy.replicas=5", "proxy.resources.limits.memory=2Gi",
		"admissionPolicy.extraProxyImages={registry.example/custom:1}",
	))
	env := controllerEnv(t, objs)
	proxyRef := "registry.example/coxswain-proxy:v9.9.9@" + digest
	for k, v := range map[string]string{
		"COXSWAIN_DISCOVERY_CA_SECRET": "other-ca", "COXSWAIN_DISCOVERY_SVID_TTL": "2h", "COXSWAIN_DISCOVERY_TRUST_DOMAIN": "example.org",
		"COXSWAIN_DISCOVERY_PORT": "7001", "COXSWAIN_DISCOVERY_BOOTSTRAP_PORT": "7002", "COXSWAIN_PROXY_IMAGE": proxyRef,
	} {
		if env[k] != v {
			t.Errorf("controller %s = %q, want %q", k, env[k], v)
		}
	}
	fs := flag.NewFlagSet("coxswain", flag.ContinueOnError)
	s, err := settings.RegisterFlags(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok }).Settings()
	if err != nil {
		t.Fatalf("the operator refuses the chart's environment: %v", err)
	}
	if s.Port != 7001 || s.BootstrapPort != 7002 || s.TrustDomain != "example.org" || s.SVIDTTL.String() != "2h0m0s" || s.ProxyImage != proxyRef {
		t.Errorf("the operator reads %+v from the chart's environment", s)
	}
	ctrl := objs["apps/v1/Deployment/"+namespace+"/coxswain-controller"]
	pool := objs["apps/v1/Deployment/"+namespace+"/coxswain-shared-proxy"]
	checkField(t, ctrl, float64(3), "spec", "replicas")
	checkField(t, pool, float64(5), "spec", "replicas")
	checkContainer(t, ctrl, "image", "registry.example/coxswain:v9.9.9@"+digest)
	checkContainer(t, pool, "image", proxyRef)
	ports := containerField(t, ctrl, "ports").([]any)
	if ports[0].(map[string]any)["containerPort"] != float64(7001) || ports[1].(map[string]any)["containerPort"] != float64(7002) {
		t.Errorf("controller ports %v, want discovery 7001 and bootstrap 7002", ports)
	}
	limits := containerField(t, pool, "resources").(map[string]any)["limits"].(map[string]any)
	if limits["memory"] != "2Gi" {
		t.Errorf("shared pool limits %v, want memory 2Gi", limits)
	}
	policy := objs["admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy//coxswain-controller-writes"]
	vars, _, _ := unstructured.NestedSlice(policy.Object, "spec", "variables")
	want := "['" + proxyRef + "', 'registry.example/custom:1']"
	if got := vars[0].(map[string]any); got["name"] != "proxyImages" || got["expression"] != want {
		t.Errorf("admission policy variable %v, want proxyImages %s", got, want)
	}
}

// TestChartMonitoringValues checks that the scrape objects are off by default, each switch
// renders its own, and their labels and interval values reach them, ours over the value's.
func TestChartMonitoringValues(t *testing.T) {
	for k := range byKey(t, helmTemplate(t)) {
		if strings.HasPrefix(k, "monitoring.coreos.com/") || strings.HasSuffix(k, "/coxswain-controller-metrics") {
			t.Errorf("the default values render %s", k)
		}
	}
	const (
		serviceMonitor = "monitoring.coreos.com/v1/ServiceMonitor/" + namespace + "/coxswain-controller"
		podMonitor     = "monitoring.coreos.com/v1/PodMonitor/" + namespace + "/coxswain-proxy"
		service        = "v1/Service/" + namespace + "/coxswain-controller-metrics"
	)
	onlyPods := byKey(t, helmTemplate(t, "metrics.podMonitor.enabled=true"))
	if _, ok := onlyPods[serviceMonitor]; ok {
		t.Error("metrics.podMonitor alone renders the ServiceMonitor")
	}
	if _, ok := onlyPods[service]; ok {
		t.Error("metrics.podMonitor alone renders the operator's metrics Service")
	}
	objs := byKey(t, helmTemplate(t, "metrics.serviceMonitor.enabled=true", "metrics.podMonitor.enabled=true",
		"metrics.serviceMonitor.labels.release=kps", "metrics.serviceMonitor.interval=15s",
		"metrics.podMonitor.labels.team=edge", `metrics.podMonitor.labels.app\.kubernetes\.io/name=other`, "metrics.podMonitor.interval=1m"))
	for _, tc := range []struct {
		key, endpoints, interval string
		labels                   map[string]string
	}{
		{serviceMonitor, "endpoints", "15s", map[string]string{"release": "kps", "app.kubernetes.io/name": "coxswain", "app.kubernetes.io/component": "controller"}},
		{podMonitor, "podMetricsEndpoints", "1m", map[string]string{"team": "edge", "app.kubernetes.io/name": "coxswain", "app.kubernetes.io/component": "proxy"}},
	} {
		u, ok := objs[tc.key]
		if !ok {
			t.Errorf("the chart renders no %s", tc.key)
			continue
		}
		if diff := cmp.Diff(tc.labels, u.GetLabels()); diff != "" {
			t.Errorf("%s labels (-want +got):\n%s", tc.key, diff)
		}
		eps, _, _ := unstructured.NestedSlice(u.Object, "spec", tc.endpoints)
		if len(eps) != 1 || eps[0].(map[string]any)["interval"] != tc.interval {
			t.Errorf("%s %s %v, want one with interval %s", tc.key, tc.endpoints, eps, tc.interval)
		}
	}
}

// TestChartDashboards checks that metrics.dashboards renders each dashboard of config/grafana in
// a ConfigMap with the sidecar's label, in the namespace asked for, and none by default.
func TestChartDashboards(t *testing.T) {
	for k := range byKey(t, helmTemplate(t)) {
		if strings.Contains(k, "/coxswain-dashboard-") {
			t.Errorf("the default values render %s", k)
		}
	}
	files, err := filepath.Glob(filepath.Join(root(t), "config", "grafana", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in config/grafana (%v)", err)
	}
	objs := byKey(t, helmTemplate(t, "metrics.dashboards.enabled=true", "metrics.dashboards.namespace=grafana"))
	for _, f := range files {
		base := filepath.Base(f)
		key := "v1/ConfigMap/grafana/coxswain-dashboard-" + strings.TrimSuffix(base, ".json")
		u, ok := objs[key]
		if !ok {
			t.Errorf("the chart renders no %s for %s", key, base)
			continue
		}
		if l := u.GetLabels(); l["grafana_dashboard"] != "1" {
			t.Errorf("%s labels %v, want grafana_dashboard=1", key, l)
		}
		got, _, _ := unstructured.NestedString(u.Object, "data", base)
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(got) != strings.TrimSpace(string(want)) {
			t.Errorf("%s holds another %s than config/grafana's: run hack/release/chart-files.sh", key, base)
		}
	}
}

// TestChartCoxswainConfig checks that config renders the CoxswainConfig of the operator, an
// object of the release (not a hook), whose spec the API types decode strictly.
func TestChartCoxswainConfig(t *testing.T) {
	if _, ok := byKey(t, helmTemplate(t))["gateway.coxswain.dev/v1alpha1/CoxswainConfig/"+namespace+"/coxswain"]; ok {
		t.Error("empty config renders a CoxswainConfig")
	}
	objs := byKey(t, helmTemplate(t, "config.proxy.serviceType=NodePort", "config.proxy.replicas=3", "config.discovery.trustDomain=example.org"))
	u, ok := objs["gateway.coxswain.dev/v1alpha1/CoxswainConfig/"+namespace+"/coxswain"]
	if !ok {
		t.Fatal("config renders no CoxswainConfig coxswain")
	}
	if a := u.GetAnnotations(); len(a) != 0 {
		t.Errorf("CoxswainConfig annotations %v, want none: an ordinary object of the release, not a hook", a)
	}
	raw, err := yaml.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	var cfg v1alpha1.CoxswainConfig
	if err := yaml.UnmarshalStrict(raw, &cfg); err != nil {
		t.Fatalf("the rendered CoxswainConfig is not one: %v", err)
	}
	if cfg.Spec.Proxy == nil || cfg.Spec.Proxy.ServiceType == nil || *cfg.Spec.Proxy.ServiceType != "NodePort" ||
		*cfg.Spec.Proxy.Replicas != 3 || cfg.Spec.Discovery == nil || *cfg.Spec.Discovery.TrustDomain != "example.org" {
		t.Errorf("CoxswainConfig spec %+v, want the values given", cfg.Spec)
	}
}

// TestChartLint runs helm lint --strict on the chart.
func TestChartLint(t *testing.T) {
	if out, stderr, err := runHelm(t, "lint", "--strict", chartDir(t)); err != nil {
		t.Fatalf("helm lint: %v\n%s%s", err, out, stderr)
	}
}

// reconcileDefaultEnv checks the COXSWAIN_* variables the chart's controller sets and kustomize's
// does not: read by the operator's own flag parsing, they must give settings.Defaults(). It then
// removes them from got, and puts both environment lists in name order.
func reconcileDefaultEnv(t *testing.T, got, want map[string]*unstructured.Unstructured) {
	t.Helper()
	const key = "apps/v1/Deployment/" + namespace + "/coxswain-controller"
	wantEnv, gotEnv := containerField(t, want[key], "env").([]any), containerField(t, got[key], "env").([]any)
	inKustomize := map[string]bool{}
	for _, e := range wantEnv {
		inKustomize[e.(map[string]any)["name"].(string)] = true
	}
	extra := map[string]string{}
	var kept []any
	for _, e := range gotEnv {
		m := e.(map[string]any)
		name := m["name"].(string)
		if !inKustomize[name] && strings.HasPrefix(name, "COXSWAIN_DISCOVERY_") {
			extra[name], _ = m["value"].(string)
			continue
		}
		kept = append(kept, e)
	}
	fs := flag.NewFlagSet("coxswain", flag.ContinueOnError)
	s, err := settings.RegisterFlags(fs, func(k string) (string, bool) { v, ok := extra[k]; return v, ok }).Settings()
	if err != nil {
		t.Fatalf("the operator refuses the chart's default environment %v: %v", extra, err)
	}
	if diff := cmp.Diff(settings.Defaults(), s); diff != "" {
		t.Errorf("the chart's explicit environment %v is not the operator's defaults (-defaults +chart):\n%s", extra, diff)
	}
	byName := func(a, b any) int {
		return strings.Compare(a.(map[string]any)["name"].(string), b.(map[string]any)["name"].(string))
	}
	slices.SortFunc(kept, byName)
	slices.SortFunc(wantEnv, byName)
	setContainerField(t, got[key], "env", kept)
	setContainerField(t, want[key], "env", wantEnv)
}

// withoutKeepPolicy checks that every Gateway API CRD of the chart (a template) carries
// helm.sh/resource-policy: keep, so that helm uninstall leaves them (and every object of their
// kinds), and removes it: the one annotation the chart adds to config/'s objects (to the CRD
// files' objects, the Gateway API's safe-upgrades policy with them). Our CRDs come from the
// chart's crds/ as config/ has them: Helm never deletes those, and they carry nothing added.
func withoutKeepPolicy(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	t.Helper()
	for _, u := range objs {
		a := u.GetAnnotations()
		if u.GetKind() == "CustomResourceDefinition" {
			_, keep := a["helm.sh/resource-policy"]
			switch ours := strings.HasSuffix(u.GetName(), "."+v1alpha1.GroupVersion.Group); {
			case ours && keep:
				t.Errorf("our CRD %s carries helm.sh/resource-policy: it belongs in crds/, as config/ has it", u.GetName())
			case !ours && a["helm.sh/resource-policy"] != "keep":
				t.Errorf("CRD %s lacks helm.sh/resource-policy: keep", u.GetName())
			}
		}
		if _, ok := a["helm.sh/resource-policy"]; !ok {
			continue
		}
		delete(a, "helm.sh/resource-policy")
		if len(a) == 0 {
			a = nil
		}
		u.SetAnnotations(a)
	}
	return objs
}

// clusterScopedWithoutNamespace removes the namespace kustomize sets on the admission policies and
// their bindings, cluster-scoped kinds its built-in schema does not know as such; the API server
// ignores it, and the chart sets none.
func clusterScopedWithoutNamespace(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	for _, u := range objs {
		if u.GetAPIVersion() == "admissionregistration.k8s.io/v1" && strings.HasPrefix(u.GetKind(), "ValidatingAdmissionPolicy") {
			u.SetNamespace("")
		}
	}
	return objs
}

// secretWriters lists the Roles and ClusterRoles that grant create or update on Secrets.
func secretWriters(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, u := range objs {
		if u.GetKind() != "Role" && u.GetKind() != "ClusterRole" {
			continue
		}
		rules, _, _ := unstructured.NestedSlice(u.Object, "rules")
		for _, r := range rules {
			rule := r.(map[string]any)
			if has(rule["resources"], "secrets") && (has(rule["verbs"], "create") || has(rule["verbs"], "update") || has(rule["verbs"], "*")) {
				out = append(out, u.GetKind()+"/"+u.GetName())
				break
			}
		}
	}
	return out
}

func has(list any, s string) bool {
	l, _ := list.([]any)
	return slices.Contains(l, any(s))
}

// controllerEnv is the controller container's environment of literal values.
func controllerEnv(t *testing.T, objs map[string]*unstructured.Unstructured) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range containerField(t, objs["apps/v1/Deployment/"+namespace+"/coxswain-controller"], "env").([]any) {
		m := e.(map[string]any)
		if v, ok := m["value"].(string); ok {
			env[m["name"].(string)] = v
		}
	}
	return env
}

func containerField(t *testing.T, u *unstructured.Unstructured, field string) any {
	t.Helper()
	if u == nil {
		t.Fatal("no such Deployment")
	}
	cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	if len(cs) != 1 {
		t.Fatalf("%s has %d containers, want 1", u.GetName(), len(cs))
	}
	return cs[0].(map[string]any)[field]
}

func setContainerField(t *testing.T, u *unstructured.Unstructured, field string, v any) {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	cs[0].(map[string]any)[field] = v
	if err := unstructured.SetNestedSlice(u.Object, cs, "spec", "template", "spec", "containers"); err != nil {
		t.Fatal(err)
	}
}

func checkContainer(t *testing.T, u *unstructured.Unstructured, field string, want any) {
	t.Helper()
	if got := containerField(t, u, field); got != want {
		t.Errorf("%s container %s = %v, want %v", u.GetName(), field, got, want)
	}
}

func checkField(t *testing.T, u *unstructured.Unstructured, want any, path ...string) {
	t.Helper()
	got, _, _ := unstructured.NestedFieldNoCopy(u.Object, path...)
	if got != want {
		t.Errorf("%s %s = %v (%T), want %v", u.GetName(), strings.Join(path, "."), got, got, want)
	}
}

// byKey indexes objects by apiVersion/kind/namespace/name, failing on a duplicate.
func byKey(t *testing.T, objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	t.Helper()
	out := map[string]*unstructured.Unstructured{}
	for _, u := range objs {
		k := strings.Join([]string{u.GetAPIVersion(), u.GetKind(), u.GetNamespace(), u.GetName()}, "/")
		if _, dup := out[k]; dup {
			t.Fatalf("%s twice", k)
		}
		out[k] = u
	}
	return out
}

func sortedKeys(m map[string]*unstructured.Unstructured) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func root(t *testing.T) string {
	t.Helper()
	r, err := testenv.ProjectRoot()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func chartDir(t *testing.T) string { return filepath.Join(root(t), "charts", "coxswain") }

// tool is the pinned binary env names, else bin/<glob> as the Makefile installs it.
func tool(t *testing.T, env, glob string) string {
	t.Helper()
	if bin := os.Getenv(env); bin != "" {
		return bin
	}
	matches, _ := filepath.Glob(filepath.Join(root(t), "bin", glob))
	if len(matches) == 0 {
		t.Fatalf("%s not found: run `make %s` or set %s", glob, strings.ToLower(env), env)
	}
	return matches[0]
}

func templateArgs(values []string) []string {
	args := []string{"template", "coxswain", "", "--namespace", namespace, "--kube-version", "1.36.0", "--include-crds"}
	for _, v := range values {
		args = append(args, "--set", v)
	}
	return args
}

func runHelm(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return runHelmEnv(t, nil, args...)
}

// runHelmEnv runs the pinned helm with env added to the test's environment.
func runHelmEnv(t *testing.T, env []string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	if len(args) > 2 && args[0] == "template" && args[2] == "" {
		args[2] = chartDir(t)
	}
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(t.Context(), tool(t, "HELM", "helm-*"), args...) //nolint:gosec // the pinned tool
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = append(os.Environ(), env...)
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// helmTemplate renders the chart with values (--set) in the install namespace.
func helmTemplate(t *testing.T, values ...string) []*unstructured.Unstructured {
	t.Helper()
	out, stderr, err := runHelm(t, templateArgs(values)...)
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", values, err, stderr)
	}
	return decodeAll(t, strings.NewReader(out))
}

// kustomizeBuild builds a kustomization of config/ with the pinned kustomize.
func kustomizeBuild(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), tool(t, "KUSTOMIZE", "kustomize-*"), "build", filepath.Join(root(t), "config", dir)) //nolint:gosec // the pinned tool
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kustomize build %s: %v\n%s", dir, err, stderr.String())
	}
	return decodeAll(t, &out)
}

func decodeAll(t *testing.T, r io.Reader) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}
