package scopeauth

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Ownership reports whether ServiceAccount namespace/name exists and is controlled by the
// Gateway of UID gateway. It is the provisioner's verdict as the cluster records it: the
// provisioner creates a dedicated proxy's ServiceAccount with the Gateway as its controller, and
// refuses to provision over a ServiceAccount of that name that is not the Gateway's.
type Ownership func(namespace, name string, gateway types.UID) bool

// ownershipTimeout bounds one read of the informer cache, which waits for its first sync.
const ownershipTimeout = 5 * time.Second

// RequireOwnership makes the Authority grant a Gateway's scope, and hand its ServiceAccount to
// the allowlist, only while owned says the ServiceAccount is the Gateway's: a foreign
// ServiceAccount that happens to carry the proxy's name gets no SVID and no scope. Call it
// before the first Update.
func (a *Authority) RequireOwnership(owned Ownership) { a.owned = owned }

// CachedOwnership is an Ownership that reads ServiceAccounts from r, the manager's informer
// cache, which every replica holds: every replica then reaches the same verdict from the same
// cluster state. A ServiceAccount the cache does not hold (not yet created, or not labelled as
// ours) is no Gateway's.
func CachedOwnership(r client.Reader) Ownership {
	return func(namespace, name string, gateway types.UID) bool {
		ctx, cancel := context.WithTimeout(context.Background(), ownershipTimeout)
		defer cancel()
		var sa corev1.ServiceAccount
		if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &sa); err != nil {
			return false
		}
		return controlledBy(&sa, gateway)
	}
}

// controlledBy reports whether the Gateway of UID gateway is sa's controller.
func controlledBy(sa *corev1.ServiceAccount, gateway types.UID) bool {
	ref := metav1.GetControllerOf(sa)
	return ref != nil && ref.UID == gateway
}
