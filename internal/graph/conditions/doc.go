// Package conditions has one constructor per status condition that the graph computes, for
// GatewayClasses, Gateways, Listeners and HTTPRoutes. Callers stamp ObservedGeneration; the status
// writer stamps LastTransitionTime when it merges, so the graph's output stays deterministic.
package conditions
