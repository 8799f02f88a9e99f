package cache

import (
	"errors"
	"fmt"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
)

// ErrInvalidScope reports a scope with no kind or an incomplete Gateway reference.
var ErrInvalidScope = errors.New("cache: invalid scope")

// ScopeKind says whose snapshot a scope selects.
type ScopeKind int

const (
	// KindSharedPool selects the snapshot of the shared proxy pool.
	KindSharedPool ScopeKind = iota + 1
	// KindGateway selects the snapshot of one Gateway's dedicated proxy.
	KindGateway
)

// Scope names one snapshot. It is comparable and used as a map key; the zero value is invalid.
type Scope struct {
	Kind ScopeKind
	// Namespace and Name identify the Gateway of a KindGateway scope; they are empty otherwise.
	Namespace string
	Name      string
}

// SharedPool returns the scope of the shared proxy pool.
func SharedPool() Scope { return Scope{Kind: KindSharedPool} }

// Gateway returns the scope of the dedicated proxy of Gateway namespace/name.
func Gateway(namespace, name string) Scope {
	return Scope{Kind: KindGateway, Namespace: namespace, Name: name}
}

// String returns "shared-pool" or "gateway/<namespace>/<name>", for logs and metric labels.
func (s Scope) String() string {
	switch s.Kind {
	case KindSharedPool:
		return "shared-pool"
	case KindGateway:
		return "gateway/" + s.Namespace + "/" + s.Name
	default:
		return "invalid"
	}
}

// Validate reports ErrInvalidScope unless s is the shared pool or a complete Gateway reference.
func (s Scope) Validate() error {
	switch {
	case s.Kind == KindSharedPool && s.Namespace == "" && s.Name == "":
		return nil
	case s.Kind == KindGateway && s.Namespace != "" && s.Name != "":
		return nil
	default:
		return fmt.Errorf("%w: %+v", ErrInvalidScope, s)
	}
}

// ScopeFromProto converts a wire scope, reporting ErrInvalidScope when no kind is set or a
// Gateway reference is incomplete.
func ScopeFromProto(p *discoveryv1.Scope) (Scope, error) {
	var s Scope
	switch k := p.GetKind().(type) {
	case *discoveryv1.Scope_SharedPool:
		s = SharedPool()
	case *discoveryv1.Scope_Gateway:
		s = Gateway(k.Gateway.GetNamespace(), k.Gateway.GetName())
	default:
		return Scope{}, fmt.Errorf("%w: no scope kind", ErrInvalidScope)
	}
	return s, s.Validate()
}

// Proto converts s to its wire form; an invalid kind gives a scope with no kind.
func (s Scope) Proto() *discoveryv1.Scope {
	switch s.Kind {
	case KindSharedPool:
		return &discoveryv1.Scope{Kind: &discoveryv1.Scope_SharedPool{SharedPool: &discoveryv1.SharedPool{}}}
	case KindGateway:
		return &discoveryv1.Scope{Kind: &discoveryv1.Scope_Gateway{
			Gateway: &discoveryv1.GatewayRef{Namespace: s.Namespace, Name: s.Name},
		}}
	default:
		return &discoveryv1.Scope{}
	}
}
