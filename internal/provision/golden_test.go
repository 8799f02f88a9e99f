package provision_test

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/internal/golden"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/provision"
	"coxswain.dev/coxswain/internal/state"
)

var update = flag.Bool("update", false, "rewrite the golden .out.yaml files from the current output")

var defaults = provision.Defaults{
	Image:    "coxswain.dev/coxswain-proxy:test",
	Replicas: 1,
	Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
	},
	DiscoveryEndpoint:        "coxswain-discovery.coxswain-system.svc:50051",
	BootstrapEndpoint:        "coxswain-discovery.coxswain-system.svc:50052",
	ControllerNamespace:      "coxswain-system",
	ControllerServiceAccount: "coxswain-controller",
	AllowedImages:            []string{"registry.example/coxswain-proxy:*"},
	AllowedTracingEndpoints:  []string{"https://otel.example:4317", "http://*", "http://169.254.10.10:4318"},
	SharedLabelPrefixes:      []string{"team.example/"},
	SharedAnnotationPrefixes: []string{"external-dns.alpha.kubernetes.io/"},
}

// render builds the graph of a case's cluster state and renders, in Gateway order, the objects
// of every Gateway's dedicated proxy or its Service on the shared pool, as one YAML stream.
func render(t testing.TB, in []byte) []byte {
	t.Helper()
	var docs [][]byte
	for _, r := range renderObjects(t, in) {
		if len(r.objects) == 0 {
			docs = append(docs, []byte("# "+r.gateway+": nothing provisioned\n"))
			continue
		}
		for _, obj := range r.objects {
			out, err := yaml.Marshal(obj)
			if err != nil {
				t.Fatalf("marshal %T: %v", obj, err)
			}
			docs = append(docs, out)
		}
	}
	return bytes.Join(docs, []byte("---\n"))
}

// rendered is what one Gateway of a case gets provisioned; nothing when objects is empty.
type rendered struct {
	gateway string
	objects []provision.Object
}

// renderObjects builds the graph of a case's cluster state and returns, in Gateway order, the
// objects of every Gateway's dedicated proxy or its Service on the shared pool.
func renderObjects(t testing.TB, in []byte) []rendered {
	t.Helper()
	cs, err := state.Decode(bytes.NewReader(in))
	if err != nil {
		t.Fatalf("decode cluster state: %v", err)
	}
	params := decodeParameters(t, in)
	g := graph.Build(cs, graph.Options{})
	var out []rendered
	for _, gw := range g.Gateways {
		r := rendered{gateway: gw.Key().String()}
		if m, ok := provision.ModelOf(gw, params[gw.Parameters.String()], defaults); ok {
			r.objects = provision.Objects(m)
		} else if m, ok := provision.SharedModelOf(gw, "coxswain-system", defaults); ok {
			r.objects = []provision.Object{provision.DesiredSharedService(m)}
		}
		out = append(out, r)
	}
	return out
}

// decodeParameters reads the CoxswainGatewayParameters documents of a case strictly, keyed by
// namespace/name.
func decodeParameters(t testing.TB, in []byte) map[string]*v1alpha1.CoxswainGatewayParameters {
	t.Helper()
	out := map[string]*v1alpha1.CoxswainGatewayParameters{}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(in)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("read document: %v", err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil || tm.Kind != state.GatewayParametersKind {
			continue
		}
		p := &v1alpha1.CoxswainGatewayParameters{}
		if err := yaml.UnmarshalStrict(doc, p); err != nil {
			t.Fatalf("decode %s: %v", tm.Kind, err)
		}
		out[p.Namespace+"/"+p.Name] = p
	}
}

// Tests that every testdata/<case>.in.yaml renders exactly testdata/<case>.out.yaml.
func TestGolden(t *testing.T) {
	for _, in := range golden.Inputs(t) {
		t.Run(golden.Name(in), func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(in) //nolint:gosec // a test fixture path from Glob
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, in, render(t, data), *update)
		})
	}
}

// Tests that no .out.yaml is left without its .in.yaml; with -update, stale ones are removed.
func TestGoldenNoStaleOutputs(t *testing.T) { golden.NoStaleOutputs(t, *update) }
