package identity

import (
	"sync"

	"coxswain.dev/coxswain/discovery/server/bootstrap"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// ServiceAccount names a ServiceAccount by namespace and name.
type ServiceAccount struct {
	Namespace string
	Name      string
}

// String returns "namespace/name".
func (s ServiceAccount) String() string { return s.Namespace + "/" + s.Name }

// Allowlist implements bootstrap.Allowlist: the shared proxy ServiceAccount of the install
// namespace may always hold an SVID, and a dedicated proxy's ServiceAccount only while it is
// registered. The provisioner registers the expected ServiceAccount of every dedicated Gateway.
// It is safe for concurrent use.
type Allowlist struct {
	shared   ServiceAccount
	reserved map[ServiceAccount]bool

	mu        sync.RWMutex
	dedicated map[ServiceAccount]struct{}
}

var _ bootstrap.Allowlist = (*Allowlist)(nil)

// NewAllowlist returns an allowlist holding only the shared proxy ServiceAccount of
// installNamespace. The reserved ServiceAccounts (the controller's) never hold an SVID, whatever
// is registered.
func NewAllowlist(installNamespace string, reserved ...ServiceAccount) *Allowlist {
	r := make(map[ServiceAccount]bool, len(reserved))
	for _, sa := range reserved {
		r[sa] = true
	}
	return &Allowlist{
		shared:    ServiceAccount{Namespace: installNamespace, Name: wellknown.SharedProxyServiceAccount},
		reserved:  r,
		dedicated: map[ServiceAccount]struct{}{},
	}
}

// Allowed reports whether namespace/serviceAccount may hold an SVID.
func (a *Allowlist) Allowed(namespace, serviceAccount string) bool {
	sa := ServiceAccount{Namespace: namespace, Name: serviceAccount}
	if sa == a.shared {
		return true
	}
	if a.reserved[sa] {
		return false
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	_, ok := a.dedicated[sa]
	return ok
}

// Register allows a dedicated proxy's ServiceAccount.
func (a *Allowlist) Register(namespace, serviceAccount string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.dedicated[ServiceAccount{Namespace: namespace, Name: serviceAccount}] = struct{}{}
}

// Unregister withdraws a dedicated proxy's ServiceAccount. SVIDs already issued stay valid until
// they expire; the stream listener's scope check is what cuts a revoked proxy off.
func (a *Allowlist) Unregister(namespace, serviceAccount string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.dedicated, ServiceAccount{Namespace: namespace, Name: serviceAccount})
}

// Replace makes set the complete list of dedicated ServiceAccounts.
func (a *Allowlist) Replace(set []ServiceAccount) {
	next := make(map[ServiceAccount]struct{}, len(set))
	for _, sa := range set {
		next[sa] = struct{}{}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.dedicated = next
}
