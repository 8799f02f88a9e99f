package sandbox

import "testing"

// Tests that the node sets only the kubelet's safe sysctls of a pod's network namespace.
func TestCheckSysctls(t *testing.T) {
	t.Parallel()
	if err := CheckSysctls(map[string]string{"net.ipv4.ip_unprivileged_port_start": "80", "net.ipv4.tcp_syncookies": "1"}); err != nil {
		t.Errorf("safe sysctls refused: %v", err)
	}
	for _, name := range []string{"kernel.msgmax", "net.core.somaxconn", "net/ipv4/ip_unprivileged_port_start", "net.ipv4.ip_unprivileged_port_start/../../x"} {
		if err := CheckSysctls(map[string]string{name: "1"}); err == nil {
			t.Errorf("sysctl %q accepted", name)
		}
	}
}
