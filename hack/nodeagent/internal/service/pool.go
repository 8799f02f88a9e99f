package service

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// ErrPoolFull reports that every address of the load-balancer pool is taken.
var ErrPoolFull = errors.New("service: the load-balancer pool is full")

// Pool hands out the addresses of a load-balancer range, one per Service, and remembers who
// holds which. The network and broadcast addresses of the range are never handed out.
type Pool struct {
	prefix netip.Prefix

	mu    sync.Mutex
	owner map[netip.Addr]string
	addr  map[string]netip.Addr
	next  netip.Addr
}

// NewPool returns an empty pool over prefix, an IPv4 range with at least one usable address.
func NewPool(prefix netip.Prefix) (*Pool, error) {
	if !prefix.Addr().Is4() || prefix.Bits() > 30 {
		return nil, fmt.Errorf("load-balancer pool %s: not an IPv4 range of /30 or wider", prefix)
	}
	prefix = prefix.Masked()
	return &Pool{prefix: prefix, owner: map[netip.Addr]string{}, addr: map[string]netip.Addr{}, next: prefix.Addr().Next()}, nil
}

// Prefix is the pool's range.
func (p *Pool) Prefix() netip.Prefix { return p.prefix }

// usable says whether a is an address of the range other than its network and broadcast ones.
func (p *Pool) usable(a netip.Addr) bool {
	return p.prefix.Contains(a) && a != p.prefix.Addr() && a != lastAddr(p.prefix)
}

// Lookup is the address key holds, if any.
func (p *Pool) Lookup(key string) (netip.Addr, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a, ok := p.addr[key]
	return a, ok
}

// Claim gives a to key if a is a usable address of the pool that nobody else holds; key
// gives up any other address. It reports whether key now holds a.
func (p *Pool) Claim(key string, a netip.Addr) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.usable(a) {
		return false
	}
	if o, ok := p.owner[a]; ok {
		return o == key
	}
	p.releaseLocked(key)
	p.owner[a], p.addr[key] = key, a
	return true
}

// Refusal says why Claim(key, a) fails, or "" when it would succeed.
func (p *Pool) Refusal(key string, a netip.Addr) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch o, taken := p.owner[a]; {
	case !p.prefix.Contains(a):
		return fmt.Sprintf("%s is outside the load-balancer pool %s", a, p.prefix)
	case !p.usable(a):
		return fmt.Sprintf("%s is the network or broadcast address of the load-balancer pool %s", a, p.prefix)
	case taken && o != key:
		return fmt.Sprintf("%s is held by Service %s", a, o)
	}
	return ""
}

// Allocate gives key an address: the one it holds, else the next free one, going round the
// range so that a released address is handed out again as late as possible.
func (p *Pool) Allocate(key string) (netip.Addr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if a, ok := p.addr[key]; ok {
		return a, nil
	}
	for range 1 << (32 - p.prefix.Bits()) {
		a := p.next
		p.next = a.Next()
		if !p.usable(p.next) {
			p.next = p.prefix.Addr().Next()
		}
		if _, taken := p.owner[a]; !taken && p.usable(a) {
			p.owner[a], p.addr[key] = key, a
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("allocate an address of %s: %w", p.prefix, ErrPoolFull)
}

// Release frees key's address, if it holds one.
func (p *Pool) Release(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.releaseLocked(key)
}

func (p *Pool) releaseLocked(key string) {
	if a, ok := p.addr[key]; ok {
		delete(p.owner, a)
		delete(p.addr, key)
	}
}

// Holding is a Service that found an address in its status: what it asks to keep.
type Holding struct {
	Key     string
	Created time.Time
	Addr    netip.Addr
}

// Restore claims the addresses the Services hold in their status, the oldest Service first,
// so that of two holding the same address the older one keeps it. It returns the keys that
// lost theirs (or held one outside the pool); they get a new address when allocated.
func (p *Pool) Restore(hs []Holding) []string {
	hs = slices.Clone(hs)
	slices.SortFunc(hs, func(a, b Holding) int {
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.Key, b.Key))
	})
	var lost []string
	for _, h := range hs {
		if !p.Claim(h.Key, h.Addr) {
			lost = append(lost, h.Key)
		}
	}
	return lost
}

// lastAddr is the broadcast address of an IPv4 prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
