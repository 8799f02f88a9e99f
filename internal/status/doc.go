// Package status writes the status the graph computed back to the Gateway API objects: it merges
// conditions so LastTransitionTime only moves when a condition's status does, keeps the route
// parent entries of other controllers, compares with what is stored, and patches only what
// changed, guarded by the resourceVersion. Only the leader writes.
package status
