package graph_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/graph/conditions"
	"coxswain.dev/coxswain/internal/state"
)

func TestSupportedVersion(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		version string
		want    metav1.ConditionStatus
	}{
		{"an unchecked version is assumed to be ours", "", metav1.ConditionTrue},
		{"another patch release is supported", "v1.7.1", metav1.ConditionTrue},
		{"another minor release is not", "v1.6.3", metav1.ConditionFalse},
		{"a missing annotation is not", "unknown", metav1.ConditionFalse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cs := state.New()
			class := &gwapiv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
			class.Spec.ControllerName = "example.com/ctl"
			cs.GatewayClasses[state.Key(class)] = class
			g := graph.Build(cs, graph.Options{ControllerName: "example.com/ctl", CRDBundleVersion: tt.version})
			if len(g.GatewayClasses) != 1 {
				t.Fatalf("got %d classes, want 1", len(g.GatewayClasses))
			}
			c := conditions.Find(g.GatewayClasses[0].Conditions, string(gwapiv1.GatewayClassConditionStatusSupportedVersion))
			if c == nil || c.Status != tt.want {
				t.Errorf("SupportedVersion = %+v, want status %s", c, tt.want)
			}
		})
	}
}

// Tests that the features needing experimental fields are claimed only with the experimental
// channel installed, and that the experimental channel keeps every standard feature.
func TestSupportedFeaturesByChannel(t *testing.T) {
	t.Parallel()
	names := func(channel string) map[gwapiv1.FeatureName]bool {
		cs := state.New()
		class := &gwapiv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
		class.Spec.ControllerName = "example.com/ctl"
		cs.GatewayClasses[state.Key(class)] = class
		g := graph.Build(cs, graph.Options{ControllerName: "example.com/ctl", CRDChannel: channel})
		out := map[gwapiv1.FeatureName]bool{}
		for _, f := range g.Status().GatewayClasses[0].Status.SupportedFeatures {
			out[f.Name] = true
		}
		return out
	}
	for _, channel := range []string{"", "standard"} {
		if !names(channel)["HTTPRouteRetryCodes"] {
			t.Errorf("channel %q does not claim HTTPRouteRetryCodes, whose retry field is standard since v1.7", channel)
		}
	}
	experimental := names(graph.ExperimentalChannel)
	for f := range names("standard") {
		if !experimental[f] {
			t.Errorf("the experimental channel does not claim %s", f)
		}
	}
}
