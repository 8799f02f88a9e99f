package client

import (
	"maps"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
)

// Resources is a proxy's view of its scope: the resources of the last applied snapshot by key.
// Values are never modified in place, so a Resources may be shared while a new one is staged.
type Resources map[string]*discoveryv1.Resource

// Apply returns the resources after snap without changing r: a full snapshot replaces
// everything, a delta upserts its resources and drops its removed keys.
func (r Resources) Apply(snap *discoveryv1.Snapshot) Resources {
	var next Resources
	if snap.GetFull() {
		next = make(Resources, len(snap.GetResources()))
	} else {
		next = maps.Clone(r)
		if next == nil {
			next = Resources{}
		}
		for _, k := range snap.GetRemovedKeys() {
			delete(next, k)
		}
	}
	for _, res := range snap.GetResources() {
		next[res.GetKey()] = res
	}
	return next
}
