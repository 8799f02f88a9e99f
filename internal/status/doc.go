// Package status writes the status the graph computed back to the Gateway API objects. The
// status of GatewayClasses, Gateways and ListenerSets is applied server-side as our own field
// manager, so the conditions and listeners of other writers stay theirs; route parents and
// policy ancestors, atomic lists, are patched whole with the entries of other controllers kept,
// guarded by the resourceVersion. Transition times move only when a condition's status does,
// and nothing is sent when what is stored is what was computed. Only the leader writes.
package status
