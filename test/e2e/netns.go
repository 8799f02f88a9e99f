package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
)

const (
	// envInNamespace marks the re-executed test binary that runs inside the private namespaces.
	envInNamespace = "COXSWAIN_E2E_NAMESPACE"
	// EnvSwitch set to "skip" skips the suite instead of failing where namespaces are missing.
	EnvSwitch = "COXSWAIN_E2E"

	// BackendNetwork is the test range put on the namespace's loopback: every address in it is
	// local there, and the API server accepts it in EndpointSlices (unlike 127.0.0.0/8).
	BackendNetwork = "198.18.0.1/24"
	// ephemeralPorts keeps the kernel's automatic port choices away from the fixed ports the
	// suite binds (the discovery listeners, health endpoints, Gateway listeners and the shared
	// pool's internal ports), so a restarted operator always gets its ports back.
	ephemeralPorts = "30000 49999"
)

// ErrNamespaces reports that the private namespaces the suite needs cannot be created here.
var ErrNamespaces = errors.New("e2e: private user and network namespaces are unavailable " +
	"(the suite needs util-linux `unshare` and user namespaces; set " + EnvSwitch + "=skip to skip it)")

// InNamespace reports whether this process is the re-executed test binary inside the private
// namespaces.
func InNamespace() bool { return os.Getenv(envInNamespace) == "1" }

// Skipped reports whether the suite was switched off with COXSWAIN_E2E=skip.
func Skipped() bool { return os.Getenv(EnvSwitch) == "skip" }

// unshareArgs are the unshare flags: a user namespace mapping us to root (so no privilege is
// needed), a network namespace with nothing but a loopback, and a PID namespace whose init is
// the test binary, so the kernel kills every process of the suite when it exits. --kill-child
// ends the test binary when unshare dies, and unshare dies with its parent (Pdeathsig).
var unshareArgs = []string{"--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child"}

// CheckNamespaces verifies that unshare exists and can create the namespaces.
func CheckNamespaces(ctx context.Context) error {
	path, err := exec.LookPath("unshare")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNamespaces, err)
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, slices.Concat(unshareArgs, []string{"true"})...) //nolint:gosec // fixed arguments
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: %s %s true: %w: %s", ErrNamespaces, path, strings.Join(unshareArgs, " "), err,
			strings.TrimSpace(stderr.String()))
	}
	return nil
}

// RunInNamespaces re-executes this binary with args inside the private namespaces, with extra
// added to its environment, and returns its exit code. Proxy settings are dropped from the
// environment: no proxy is reachable from inside.
func RunInNamespaces(ctx context.Context, args, extra []string) (int, error) {
	self, err := os.Executable()
	if err != nil {
		return 1, fmt.Errorf("re-execute in namespaces: %w", err)
	}
	cmd := exec.CommandContext(ctx, "unshare", slices.Concat(unshareArgs, []string{"--", self}, args)...) //nolint:gosec // our own binary
	cmd.Env = append(append(withoutProxySettings(os.Environ()), envInNamespace+"=1"), extra...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), nil
	}
	if err != nil {
		return 1, fmt.Errorf("re-execute in namespaces: %w", err)
	}
	return 0, nil
}

func withoutProxySettings(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(name) {
		case "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "GRPC_PROXY":
			continue
		}
		out = append(out, kv)
	}
	return out
}

// SetUpNamespace prepares the network namespace from inside: it refuses to go on when any
// interface besides the loopback exists (then this is not a private namespace and traffic
// could leave the machine), brings the loopback up with BackendNetwork on it, narrows the
// ephemeral port range and checks that no route leads out.
func SetUpNamespace(ctx context.Context) error {
	if err := onlyLoopback(); err != nil {
		return err
	}
	if err := configureLoopback(ctx); err != nil {
		return fmt.Errorf("set up loopback: %w", err)
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_local_port_range", []byte(ephemeralPorts), 0o644); err != nil { //nolint:gosec // a sysctl of our own network namespace
		return fmt.Errorf("narrow the ephemeral port range: %w", err)
	}
	return noRouteOut(ctx)
}

func onlyLoopback() error {
	ifaces, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("list interfaces: %w", err)
	}
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagLoopback == 0 {
			return fmt.Errorf("e2e: interface %s exists: this is not a private network namespace, refusing to run", ifc.Name)
		}
	}
	return nil
}

// configureLoopback uses iproute2 when it is installed and netlink directly otherwise.
func configureLoopback(ctx context.Context) error {
	ip, err := exec.LookPath("ip")
	if err != nil {
		return configureLoopbackNetlink()
	}
	for _, args := range [][]string{{"link", "set", "lo", "up"}, {"addr", "add", BackendNetwork, "dev", "lo"}} {
		if out, err := exec.CommandContext(ctx, ip, args...).CombinedOutput(); err != nil { //nolint:gosec // fixed arguments
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
		}
	}
	return nil
}

// noRouteOut checks that a datagram socket cannot even be connected to an outside address.
// Connecting a UDP socket sends nothing; it only looks up the route.
func noRouteOut(ctx context.Context) error {
	conn, err := (&net.Dialer{}).DialContext(ctx, "udp", "192.0.2.1:9")
	if err == nil {
		_ = conn.Close()
		return errors.New("e2e: the network namespace has a route out, refusing to run")
	}
	if !errors.Is(err, syscall.ENETUNREACH) {
		return fmt.Errorf("e2e: check that no route leads out: %w", err)
	}
	return nil
}
