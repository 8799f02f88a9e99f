package rebuild

import (
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/internal/state"
	"coxswain.dev/coxswain/internal/state/statetest"
)

// scaleState is statetest.Synthetic, the cluster internal/graph's BenchmarkBuildCompile uses,
// so that the figures compare.
func scaleState(routes int) *state.ClusterState { return statetest.Synthetic(routes) }

// editRoute returns a copy of the route under key whose first rule has one more path match: a
// spec change that moves its listener's resource and so the shared pool's version.
func editRoute(cs *state.ClusterState, key types.NamespacedName) *gwapiv1.HTTPRoute {
	r := cs.HTTPRoutes[key].DeepCopy()
	r.Generation++
	prefix, path := gwapiv1.PathMatchPathPrefix, "/edited"
	r.Spec.Rules[0].Matches = append(r.Spec.Rules[0].Matches, gwapiv1.HTTPRouteMatch{Path: &gwapiv1.HTTPPathMatch{Type: &prefix, Value: &path}})
	return r
}
