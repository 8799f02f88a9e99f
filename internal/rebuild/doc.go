// Package rebuild runs the translation pipeline in the operator: a Debouncer coalesces change
// events into one rebuild (a short holdoff, bounded by a maximum delay), Load reads the informer
// cache into a state.ClusterState, and Pipeline turns it into per-scope snapshots in the
// discovery cache, a fresh scope authority and, on the leader, status. Equal cluster states give
// equal output, so a rebuild of an unchanged world changes nothing. Changes collects the kinds
// of the changes each rebuild handles, and Metrics records its duration by trigger and the size
// of the snapshots it publishes.
package rebuild
