// Package health tells kubelets and operators how the proxy's control channel is doing. Its
// Tracker follows what the agent reports (SVIDs issued, streams opened and closed, snapshots
// applied or refused, a permanent stop) and derives the /readyz state NotReady, Degraded or
// Ready with a reason; the same facts feed the proxy's Prometheus metrics.
package health
