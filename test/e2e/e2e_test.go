package e2e

import (
	"testing"
)

const (
	operatorReady = "the operator creates its CA and trust bundle, listens, and reports Ready"
	proxyReady    = "the shared proxy bootstraps with its ServiceAccount token and becomes Ready"
	routed        = "a route to a backend is served with its header filter and unknown hosts get 404"
	refused       = "a proxy of another ServiceAccount, or asking for a Gateway it does not own, is refused"
	dedicated     = "a dedicated Gateway is served to the proxy of its own ServiceAccount and to no other"
	outage        = "traffic flows while the operator is down and route changes are served after its restart"
	rotation      = "the proxy renews its SVID under load without failing a request"
	distrust      = "a distrusted root is replaced and the proxy recovers by itself"
	ownRBAC       = "the operator does its work with only the permissions of config/rbac"
)

// TestOperatorAndProxiesEndToEnd runs the scenarios in order against one control plane: each
// builds on the state the earlier ones left.
func TestOperatorAndProxiesEndToEnd(t *testing.T) {
	if !InNamespace() {
		t.Skip(EnvSwitch + "=skip: the suite runs only inside its private namespaces")
	}
	s := newSuite(t)
	s.runScenarios([]scenario{
		{operatorReady, nil, s.operatorBecomesReady},
		{proxyReady, []string{operatorReady}, s.sharedProxyBecomesReady},
		{routed, []string{proxyReady}, s.routeIsServed},
		{refused, []string{operatorReady}, s.impostorsAreRefused},
		{dedicated, []string{routed}, s.dedicatedGatewayIsServedToItsOwnProxy},
		{outage, []string{routed}, s.trafficSurvivesOperatorOutage},
		{distrust, []string{routed}, s.proxyRecoversFromADistrustedRoot},
		{rotation, []string{routed}, s.svidRotatesUnderLoad},
		{ownRBAC, []string{routed}, s.operatorRunsWithItsRBAC},
	})
}
