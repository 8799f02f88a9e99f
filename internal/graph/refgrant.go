package graph

import (
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// reference describes one side of a cross-namespace reference for ReferenceGrant checks.
type reference struct {
	group, kind, namespace, name string
}

// refGrants indexes ReferenceGrants by the namespace they grant access into.
type refGrants map[string][]*gwapiv1.ReferenceGrant

func newRefGrants(all map[types.NamespacedName]*gwapiv1.ReferenceGrant) refGrants {
	out := refGrants{}
	for key, g := range all {
		out[key.Namespace] = append(out[key.Namespace], g)
	}
	return out
}

// allows reports whether a reference from one object to another is permitted: always within a
// namespace, otherwise only with a ReferenceGrant in the target's namespace.
func (r refGrants) allows(from, to reference) bool {
	if from.namespace == to.namespace {
		return true
	}
	for _, g := range r[to.namespace] {
		if grantsFrom(g, from) && grantsTo(g, to) {
			return true
		}
	}
	return false
}

func grantsFrom(g *gwapiv1.ReferenceGrant, from reference) bool {
	for _, f := range g.Spec.From {
		if string(f.Group) == from.group && string(f.Kind) == from.kind && string(f.Namespace) == from.namespace {
			return true
		}
	}
	return false
}

func grantsTo(g *gwapiv1.ReferenceGrant, to reference) bool {
	for _, t := range g.Spec.To {
		if string(t.Group) != to.group || string(t.Kind) != to.kind {
			continue
		}
		if t.Name == nil || *t.Name == "" || string(*t.Name) == to.name {
			return true
		}
	}
	return false
}
