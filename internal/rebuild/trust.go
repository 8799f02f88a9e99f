package rebuild

import (
	"cmp"
	"context"
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/identity/trustbundle"
)

// TrustCopier keeps a copy of the trust bundle in the namespaces of dedicated proxies, whose
// ConfigMap volumes can only come from their own namespace; trustbundle.Replicator is one.
type TrustCopier interface {
	Sync(ctx context.Context, targets []trustbundle.Target) error
}

// TrustTargets returns one target per namespace holding a dedicated Gateway, sorted by
// namespace. The copy is owned by the namespace's first dedicated Gateway by name, so it is
// garbage-collected with it; the next rebuild writes it again while another remains.
func TrustTargets(g *graph.Graph) []trustbundle.Target {
	owners := map[string]*gwapiv1.Gateway{}
	for _, gw := range g.Gateways {
		if !gw.Dedicated || gw.ProxyName == "" {
			continue
		}
		src := gw.Source
		if cur, ok := owners[src.Namespace]; !ok || src.Name < cur.Name {
			owners[src.Namespace] = src
		}
	}
	out := make([]trustbundle.Target, 0, len(owners))
	for _, ns := range slices.Sorted(maps.Keys(owners)) {
		out = append(out, trustbundle.Target{Namespace: ns, Owner: ownerOf(owners[ns])})
	}
	return out
}

func ownerOf(gw *gwapiv1.Gateway) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         gwapiv1.GroupVersion.String(),
		Kind:               "Gateway",
		Name:               gw.Name,
		UID:                gw.UID,
		BlockOwnerDeletion: ptr.To(false),
	}
}

// syncTrust hands the targets to the copier when they differ from the last ones it took.
func (p *Pipeline) syncTrust(ctx context.Context, g *graph.Graph) error {
	targets := TrustTargets(g)
	if p.trustSynced && slices.EqualFunc(targets, p.lastTrust, sameTarget) {
		return nil
	}
	if err := p.TrustCopies.Sync(ctx, targets); err != nil {
		return err
	}
	p.lastTrust, p.trustSynced = targets, true
	return nil
}

func sameTarget(a, b trustbundle.Target) bool {
	return cmp.Compare(a.Namespace, b.Namespace) == 0 && a.Owner.UID == b.Owner.UID && a.Owner.Name == b.Owner.Name
}
