package graph

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/graph/conditions"
)

// reservedProxyNames are ServiceAccounts a dedicated proxy may never run as: an SVID for them
// would carry the identity of the shared pool or of the controller.
var reservedProxyNames = []string{wellknown.SharedProxyServiceAccount, wellknown.ControllerServiceAccount}

// refuseProxyNameConflicts refuses the dedicated proxy of every Gateway whose proxy name is
// reserved, or is taken in its namespace by an older Gateway (by creation time, then name), so
// the proxy of a Gateway already serving is never taken over by a newcomer. A refused Gateway
// keeps no ProxyName: it is not provisioned, and no proxy may bootstrap or subscribe for it.
func refuseProxyNameConflicts(gateways []*Gateway) {
	byName := map[types.NamespacedName][]*Gateway{}
	for _, gw := range gateways {
		if gw.ProxyName == "" || !gw.Dedicated {
			gw.ProxyName = ""
			continue
		}
		if slices.Contains(reservedProxyNames, gw.ProxyName) {
			gw.refuseProxyName(fmt.Sprintf("proxy name %q is reserved for Coxswain's own ServiceAccount", gw.ProxyName))
			continue
		}
		key := types.NamespacedName{Namespace: gw.Source.Namespace, Name: gw.ProxyName}
		byName[key] = append(byName[key], gw)
	}
	for key, gws := range byName {
		if len(gws) < 2 {
			continue
		}
		slices.SortFunc(gws, olderFirst)
		for _, gw := range gws[1:] {
			gw.refuseProxyName(fmt.Sprintf("proxy name %q is already used by the proxy of Gateway %s/%s",
				key.Name, key.Namespace, gws[0].Source.Name))
		}
	}
}

func (gw *Gateway) refuseProxyName(msg string) {
	gw.ProxyName = ""
	if gw.problem == nil {
		gw.problem = ptr(conditions.NewGatewayProxyNameConflict(msg))
	}
}

func olderFirst(a, b *Gateway) int {
	ta, tb := a.Source.CreationTimestamp, b.Source.CreationTimestamp
	switch {
	case ta.Before(&tb):
		return -1
	case tb.Before(&ta):
		return 1
	}
	return compareKeys(a.Key(), b.Key())
}
