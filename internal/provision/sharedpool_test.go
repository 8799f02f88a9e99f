package provision_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"coxswain.dev/coxswain/internal/golden"
	"coxswain.dev/coxswain/internal/provision"
)

// Tests that the shared pool's Deployment, which config/proxy ships and the operator does not
// render, rolls and drains as the rendered proxy Deployments do: the same strategy, the same
// drain flags, and the grace period computed from them.
func TestSharedPoolDeploymentDrainsAsRendered(t *testing.T) {
	t.Parallel()
	d := sharedPool(t)
	if diff := cmp.Diff(provision.RollingUpdate(), d.Spec.Strategy); diff != "" {
		t.Errorf("strategy (-rendered +shared pool):\n%s", diff)
	}
	pod := d.Spec.Template.Spec
	if want := int64(provision.TerminationGracePeriod / time.Second); ptr.Deref(pod.TerminationGracePeriodSeconds, -1) != want {
		t.Errorf("terminationGracePeriodSeconds %d, want %d", ptr.Deref(pod.TerminationGracePeriodSeconds, -1), want)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want the proxy alone", len(pod.Containers))
	}
	for _, arg := range provision.DrainArgs() {
		if !slices.Contains(pod.Containers[0].Args, arg) {
			t.Errorf("the shared pool's args %q lack %s", pod.Containers[0].Args, arg)
		}
	}
}

// sharedPool decodes config/proxy/deployment.yaml strictly.
func sharedPool(t *testing.T) *appsv1.Deployment {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "config", "proxy", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	d := &appsv1.Deployment{}
	if err := yaml.UnmarshalStrict(b, d); err != nil {
		t.Fatalf("decode config/proxy/deployment.yaml: %v", err)
	}
	return d
}

// Tests that every proxy Deployment, rendered for each golden case or shipped for the shared
// pool, gives the proxy its whole drain before the kubelet kills it: terminationGracePeriodSeconds
// at least the --drain-period and --shutdown-timeout of its args and the proxy's own exit
// bound after them (the health server's 1 s and the cut tunnels' 1 s); and that no rollout
// takes a ready pod away before its replacement is ready.
func TestProxyDeploymentsGraceCoversTheDrain(t *testing.T) {
	t.Parallel()
	const exit = 2 * time.Second
	deployments := map[string]*appsv1.Deployment{"config/proxy/deployment.yaml": sharedPool(t)}
	for _, in := range golden.Inputs(t) {
		data, err := os.ReadFile(in) //nolint:gosec // a test fixture path from Glob
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range renderObjects(t, data) {
			for _, obj := range r.objects {
				if d, ok := obj.(*appsv1.Deployment); ok {
					deployments[golden.Name(in)+": "+d.Name] = d
				}
			}
		}
	}
	if len(deployments) < 3 {
		t.Fatalf("only %d Deployments rendered", len(deployments))
	}
	for name, d := range deployments {
		pod := d.Spec.Template.Spec
		drain, timeout := durationArg(pod.Containers[0].Args, "--drain-period"), durationArg(pod.Containers[0].Args, "--shutdown-timeout")
		if drain <= 0 || timeout <= 0 {
			t.Errorf("%s: args %q lack a drain period or a shutdown timeout", name, pod.Containers[0].Args)
			continue
		}
		if grace := time.Duration(ptr.Deref(pod.TerminationGracePeriodSeconds, 0)) * time.Second; grace < drain+timeout+exit {
			t.Errorf("%s: grace %s for a %s drain period and a %s shutdown timeout", name, grace, drain, timeout)
		}
		if u := d.Spec.Strategy.RollingUpdate; u == nil || u.MaxUnavailable == nil || u.MaxUnavailable.IntValue() != 0 {
			t.Errorf("%s: strategy %+v, want maxUnavailable 0", name, d.Spec.Strategy)
		}
	}
}

// durationArg is the value of the flag name=value in args, 0 without one.
func durationArg(args []string, name string) time.Duration {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			d, _ := time.ParseDuration(v)
			return d
		}
	}
	return 0
}
