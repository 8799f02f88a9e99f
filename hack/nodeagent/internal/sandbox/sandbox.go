package sandbox

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

// Sandbox is a pod's network namespace, held open by a pause process, with the pod's address.
type Sandbox struct {
	// IP is the pod's address on the bridge.
	IP  netip.Addr
	pid int
	net *Network
	cmd *exec.Cmd
	// done closes when the pause process has exited.
	done chan struct{}
}

// Start runs a pause process (self, the agent binary, with the pause verb) in a new network
// namespace and attaches it to the bridge with a fresh address. podUID names the node end of
// the veth pair.
func (n *Network) Start(ctx context.Context, self, podUID string) (*Sandbox, error) {
	addr, err := n.allocate()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, VerbPause) //nolint:gosec,noctx // the agent's own binary; stopped by Stop, not by a context
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNET,
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		n.release(addr)
		return nil, fmt.Errorf("start pod sandbox: %w", err)
	}
	s := &Sandbox{IP: addr, pid: cmd.Process.Pid, net: n, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // the pause process ends by Stop's signal: its status says nothing
		close(s.done)
	}()
	if err := n.attach(ctx, s.pid, vethName(podUID), addr); err != nil {
		return nil, errors.Join(fmt.Errorf("attach pod sandbox: %w", err), s.Stop())
	}
	return s, nil
}

// NetNS is the path of the sandbox's network namespace.
func (s *Sandbox) NetNS() string { return fmt.Sprintf("/proc/%d/ns/net", s.pid) }

// Stop ends the pause process, which destroys the network namespace and with it the veth
// pair, and releases the address.
func (s *Sandbox) Stop() error {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.net.release(s.IP)
	return nil
}

// vethName is the node end of a pod's veth pair: short enough for IFNAMSIZ, stable per pod.
func vethName(podUID string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(podUID))
	return fmt.Sprintf("cx%08x", h.Sum32())
}

// pause waits for SIGTERM or SIGINT: the pause process only holds its namespaces open.
func pause() int {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	return 0
}
