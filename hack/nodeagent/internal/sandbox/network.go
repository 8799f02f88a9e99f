package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrRouteOut reports a network namespace with a route to the outside: the agent refuses to
// put pod addresses there.
var ErrRouteOut = errors.New("sandbox: the network namespace has a route out; run the agent in a private network namespace")

// ErrForeignProc reports a /proc mounted for another PID namespace than the agent's.
var ErrForeignProc = errors.New("sandbox: /proc belongs to another PID namespace; run the agent with a /proc of its own (unshare --pid --fork --mount --mount-proc)")

// Network is the node's bridge and the pod addresses on it.
type Network struct {
	bridge  string
	prefix  netip.Prefix
	gateway netip.Addr
	// routed are the ranges served in the node's namespace (services, load balancers): local
	// there, and routed from each pod through the bridge.
	routed []netip.Prefix

	mu   sync.Mutex
	used map[netip.Addr]bool
	next netip.Addr
}

// SetUpNetwork checks that no route leads out of the current network namespace, then creates
// bridge with the first address of prefix on it, replacing one of that name. Every address of
// the routed ranges becomes local to the namespace (a local route on lo, so that the service
// proxy may bind any of them), and pods get a route to each through the bridge.
func SetUpNetwork(ctx context.Context, bridge string, prefix netip.Prefix, routed ...netip.Prefix) (*Network, error) {
	if !prefix.Addr().Is4() || prefix.Bits() > 30 {
		return nil, fmt.Errorf("set up network: %s is not an IPv4 prefix with room for pods", prefix)
	}
	var local []netip.Prefix
	for _, r := range routed {
		if !r.Addr().Is4() || r.Overlaps(prefix) {
			return nil, fmt.Errorf("set up network: %s is not an IPv4 range apart from the pods' %s", r, prefix)
		}
		local = append(local, r.Masked())
	}
	if err := CheckNoRouteOut(ctx); err != nil {
		return nil, err
	}
	if err := ownProc(); err != nil {
		return nil, err
	}
	prefix = prefix.Masked()
	gw := prefix.Addr().Next()
	n := &Network{bridge: bridge, prefix: prefix, gateway: gw, routed: local, used: map[netip.Addr]bool{}, next: gw.Next()}
	gwCIDR := netip.PrefixFrom(gw, prefix.Bits()).String()
	// A bridge left by an earlier run of the agent in this namespace goes: its pods died with it.
	_ = ip(ctx, "link", "del", bridge)
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", bridge, "type", "bridge"},
		{"addr", "add", gwCIDR, "dev", bridge},
		{"link", "set", bridge, "up"},
	} {
		if err := ip(ctx, args...); err != nil {
			return nil, fmt.Errorf("set up network: %w", err)
		}
	}
	for _, r := range local {
		if err := ip(ctx, "route", "replace", "local", r.String(), "dev", "lo"); err != nil {
			return nil, fmt.Errorf("set up network: %w", err)
		}
	}
	return n, nil
}

// Gateway is the bridge's address: the node's address as pods see it.
func (n *Network) Gateway() netip.Addr { return n.gateway }

// allocate takes the next free pod address, going round the range so a released address is
// reused as late as possible.
func (n *Network) allocate() (netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for tries := 0; tries < 1<<(32-n.prefix.Bits()); tries++ {
		a := n.next
		n.next = a.Next()
		if !n.prefix.Contains(n.next) || n.next == lastAddr(n.prefix) {
			n.next = n.gateway.Next()
		}
		if !n.used[a] && a != n.gateway && n.prefix.Contains(a) && a != lastAddr(n.prefix) {
			n.used[a] = true
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("allocate pod address: %s is full", n.prefix)
}

func (n *Network) release(a netip.Addr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.used, a)
}

// lastAddr is the broadcast address of an IPv4 prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// attach wires the network namespace of process pid to the bridge: a veth pair whose node end
// hostIf joins the bridge and whose other end is eth0 with addr inside.
func (n *Network) attach(ctx context.Context, pid int, hostIf string, addr netip.Addr) error {
	p := strconv.Itoa(pid)
	cidr := netip.PrefixFrom(addr, n.prefix.Bits()).String()
	if err := ip(ctx, "link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", p); err != nil {
		return err
	}
	if err := ip(ctx, "link", "set", hostIf, "master", n.bridge, "up"); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", cidr, "dev", "eth0"},
		{"link", "set", "eth0", "up"},
	} {
		if err := nsenterIP(ctx, p, args...); err != nil {
			return err
		}
	}
	for _, r := range n.routed {
		if err := nsenterIP(ctx, p, "route", "add", r.String(), "via", n.gateway.String(), "dev", "eth0"); err != nil {
			return err
		}
	}
	return nil
}

func ip(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput() //nolint:gosec // fixed verbs, names the agent chose
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func nsenterIP(ctx context.Context, pid string, args ...string) error {
	full := append([]string{"--target", pid, "--net", "--", "ip"}, args...)
	out, err := exec.CommandContext(ctx, "nsenter", full...).CombinedOutput() //nolint:gosec // fixed verbs, names the agent chose
	if err != nil {
		return fmt.Errorf("nsenter -t %s -n ip %s: %w: %s", pid, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// ownProc checks that /proc shows this PID namespace: pod network namespaces are found as
// /proc/<pid>/ns/net, and a /proc of another PID namespace names other processes.
func ownProc() error {
	self, err := os.Readlink("/proc/self")
	if err != nil {
		return fmt.Errorf("read /proc/self: %w", err)
	}
	if self != strconv.Itoa(os.Getpid()) {
		return ErrForeignProc
	}
	return nil
}

// CheckNoRouteOut fails with ErrRouteOut unless nothing in the current network namespace leads
// out: no default route, and a datagram socket cannot even be connected to an outside address
// (which also catches a route to that range). Everything that puts or dials cluster addresses
// checks it first: a packet to such an address from a namespace with a route out leaves the
// machine.
func CheckNoRouteOut(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, "ip", "route", "show", "default").CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip route show default: %w: %s", err, bytes.TrimSpace(out))
	}
	if route := bytes.TrimSpace(out); len(route) > 0 {
		return fmt.Errorf("%w (default route %s)", ErrRouteOut, route)
	}
	conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "udp", "192.0.2.1:9")
	if err == nil {
		_ = conn.Close()
		return ErrRouteOut
	}
	if !errors.Is(err, syscall.ENETUNREACH) {
		return fmt.Errorf("check that no route leads out: %w", err)
	}
	return nil
}
