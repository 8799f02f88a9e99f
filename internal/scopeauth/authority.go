package scopeauth

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"

	"coxswain.dev/coxswain/discovery/server/stream"
	"coxswain.dev/coxswain/internal/graph"
)

// ErrNotReady is returned until the first graph is known. It does not wrap
// stream.ErrUnknownGateway, so the stream server refuses the subscription as UNAVAILABLE (the
// proxy retries) instead of denying it, and keeps live streams.
var ErrNotReady = errors.New("scopeauth: no cluster state seen yet")

// ServiceAccount names the ServiceAccount of a dedicated proxy.
type ServiceAccount struct {
	Namespace string
	Name      string
}

// Authority implements stream.ScopeAuthority from the latest graph: a dedicated Gateway's scope
// belongs to the ServiceAccount "<gateway>-<gatewayclass>" in its namespace; every other Gateway
// (unknown, not ours, or served by the shared pool) has no dedicated proxy. It is safe for
// concurrent use.
type Authority struct {
	reserved map[ServiceAccount]bool
	// owned, when set, must say a Gateway's ServiceAccount is its own before it is granted.
	owned    Ownership
	expected atomic.Pointer[map[types.NamespacedName]string]

	mu         sync.Mutex
	onChange   []func()
	onIdentity []func([]ServiceAccount)
}

var _ stream.ScopeAuthority = (*Authority)(nil)

// New returns an Authority that answers ErrNotReady until its first Update and never grants a
// Gateway one of the reserved ServiceAccounts (the shared pool's and the controller's).
func New(reserved ...ServiceAccount) *Authority {
	r := make(map[ServiceAccount]bool, len(reserved))
	for _, sa := range reserved {
		r[sa] = true
	}
	return &Authority{reserved: r}
}

// ExpectedServiceAccount returns the ServiceAccount whose proxy may subscribe to Gateway
// namespace/name, or an error wrapping stream.ErrUnknownGateway.
func (a *Authority) ExpectedServiceAccount(namespace, name string) (string, error) {
	expected := a.expected.Load()
	if expected == nil {
		return "", ErrNotReady
	}
	key := types.NamespacedName{Namespace: namespace, Name: name}
	sa, ok := (*expected)[key]
	if !ok {
		return "", fmt.Errorf("%w: %s has no dedicated proxy", stream.ErrUnknownGateway, key)
	}
	return sa, nil
}

// OnChange registers fn to run after every Update that changed an answer, such as
// func() { streams.Reauthorize() }, which closes the streams no longer allowed.
func (a *Authority) OnChange(fn func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.onChange = append(a.onChange, fn)
}

// OnDedicatedIdentities registers fn to receive the complete set of dedicated proxy
// ServiceAccounts, sorted, after the first Update and every Update that changed it.
func (a *Authority) OnDedicatedIdentities(fn func([]ServiceAccount)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.onIdentity = append(a.onIdentity, fn)
}

// Update swaps in the answers of g and reports whether they changed; hooks run before it
// returns. Updates must not run concurrently with each other.
func (a *Authority) Update(g *graph.Graph) bool {
	next := Expected(g, a.reserved)
	a.dropForeign(g, next)
	prev := a.expected.Swap(&next)
	if prev != nil && maps.Equal(*prev, next) {
		return false
	}
	a.mu.Lock()
	onChange, onIdentity := slices.Clone(a.onChange), slices.Clone(a.onIdentity)
	a.mu.Unlock()
	if prev != nil {
		for _, fn := range onChange {
			fn()
		}
	}
	ids := Identities(next)
	for _, fn := range onIdentity {
		fn(ids)
	}
	return true
}

// Expected maps every dedicated Gateway of g to the ServiceAccount of its proxy, leaving out
// the Gateways whose ServiceAccount is reserved or is also another Gateway's: "<gateway>-<class>"
// names collide ("a" of class "b-c" and "a-b" of class "c"), and two Gateways sharing an
// identity could read each other's keys. Such Gateways get no dedicated proxy identity at all,
// whatever the provisioner does.
func Expected(g *graph.Graph, reserved map[ServiceAccount]bool) map[types.NamespacedName]string {
	out := map[types.NamespacedName]string{}
	owners := map[ServiceAccount]int{}
	for _, gw := range g.Gateways {
		if gw.Dedicated && gw.ProxyName != "" {
			out[gw.Key()] = gw.ProxyName
			owners[ServiceAccount{Namespace: gw.Key().Namespace, Name: gw.ProxyName}]++
		}
	}
	for key, sa := range out {
		id := ServiceAccount{Namespace: key.Namespace, Name: sa}
		if reserved[id] || owners[id] > 1 {
			delete(out, key)
		}
	}
	return out
}

// dropForeign removes from expected the Gateways whose ServiceAccount is not their own.
func (a *Authority) dropForeign(g *graph.Graph, expected map[types.NamespacedName]string) {
	if a.owned == nil {
		return
	}
	for _, gw := range g.Gateways {
		sa, ok := expected[gw.Key()]
		if ok && !a.owned(gw.Key().Namespace, sa, gw.Source.UID) {
			delete(expected, gw.Key())
		}
	}
}

// Identities returns the distinct ServiceAccounts of expected, sorted.
func Identities(expected map[types.NamespacedName]string) []ServiceAccount {
	out := make([]ServiceAccount, 0, len(expected))
	for key, sa := range expected {
		out = append(out, ServiceAccount{Namespace: key.Namespace, Name: sa})
	}
	slices.SortFunc(out, func(x, y ServiceAccount) int {
		return cmp.Or(cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Name, y.Name))
	})
	return slices.Compact(out)
}
