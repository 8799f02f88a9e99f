// Package graph is the second stage of the translation pipeline: it turns a state.ClusterState
// into a Graph of our GatewayClasses, Gateways, listeners and HTTPRoutes with every reference
// resolved, ReferenceGrants applied, listener conflicts found, routes attached to listeners and
// every status condition computed. It is pure: values in, values out, no API server calls.
package graph
