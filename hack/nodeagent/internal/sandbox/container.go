package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The verbs under which the agent's binary runs as a pause process or a container init.
const (
	VerbPause     = "pause"
	VerbContainer = "container-init"
)

// Mount is a bind mount of a host directory into a container's root.
type Mount struct {
	Source   string `json:"source"`
	Target   string `json:"target"` // absolute, inside the root
	ReadOnly bool   `json:"readOnly"`
}

// Spec is what a container init needs to become the container.
type Spec struct {
	NetNS    string   `json:"netns"`
	Root     string   `json:"root"`
	Hostname string   `json:"hostname"`
	WorkDir  string   `json:"workDir"`
	Mounts   []Mount  `json:"mounts"`
	Argv     []string `json:"argv"`
	Env      []string `json:"env"`
	// User is who the container runs as; nil keeps the init's user, the namespace's root.
	User *User `json:"user,omitempty"`
	// ReadOnlyRoot makes the root read-only (readOnlyRootFilesystem); volumes keep their own
	// modes.
	ReadOnlyRoot bool `json:"readOnlyRoot,omitempty"`
	// Sysctls are written in the pod's network namespace before the container starts: names
	// as the pod's securityContext gives them (net.ipv4.ip_unprivileged_port_start).
	Sysctls map[string]string `json:"sysctls,omitempty"`
}

// User is a container's user, group and supplementary groups.
type User struct {
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups,omitempty"`
	// SetGroups is false in a user namespace that denies setgroups: the groups stay.
	SetGroups bool `json:"setGroups"`
}

// devices are bind-mounted from the agent's /dev into every container's /dev.
var devices = []string{"null", "zero", "random", "urandom"}

// Prepare creates the mount points of spec inside its root, so the container init only mounts.
func Prepare(spec *Spec) error {
	for _, d := range devices {
		if err := touch(filepath.Join(spec.Root, "dev", d)); err != nil {
			return err
		}
	}
	for _, m := range spec.Mounts {
		if info, err := os.Stat(m.Source); err == nil && !info.IsDir() {
			// A subPath naming a file mounts onto a file.
			if err := touch(filepath.Join(spec.Root, m.Target)); err != nil {
				return err
			}
			continue
		}
		if err := os.MkdirAll(filepath.Join(spec.Root, m.Target), 0o755); err != nil { //nolint:gosec // a world-readable mount point, as in an image
			return fmt.Errorf("create mount point %s: %w", m.Target, err)
		}
	}
	return nil
}

func touch(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil { //nolint:gosec // a world-readable directory, as in an image
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o644) //nolint:gosec // an empty mount point
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	return f.Close()
}

// Command returns the container init command for spec (self is the agent's binary) and the
// function that sends spec once it started. Output goes to stdout and stderr. The init runs in new mount
// and UTS namespaces; spec travels through a pipe, not the environment or the command line,
// because it carries the container's environment, secrets included.
func Command(self string, spec *Spec, stdout, stderr io.Writer) (*exec.Cmd, func() error, error) {
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, nil, fmt.Errorf("encode container spec: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("container spec pipe: %w", err)
	}
	cmd := exec.Command(self, VerbContainer) //nolint:gosec,noctx // the agent's own binary; the pod worker signals it
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.ExtraFiles = []*os.File{r}
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS,
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
	}
	send := func() error {
		_ = r.Close() // the child holds its own copy now
		_, err := w.Write(data)
		return errors.Join(err, w.Close())
	}
	return cmd, send, nil
}

// becomeContainer runs in the container init: it reads the spec from fd 3, mounts the
// volumes, joins the pod's network namespace, chroots into the pod's root and executes the
// container's binary. It returns only on failure.
func becomeContainer() error {
	runtime.LockOSThread() // setns applies to this thread, which then executes the binary
	f := os.NewFile(3, "spec")
	var spec Spec
	err := json.NewDecoder(f).Decode(&spec)
	_ = f.Close()
	if err != nil {
		return fmt.Errorf("read container spec: %w", err)
	}
	if err := mountAll(&spec); err != nil {
		return err
	}
	if err := joinNetwork(spec.NetNS); err != nil {
		return err
	}
	if err := writeSysctls(spec.Sysctls); err != nil {
		return err
	}
	if spec.Hostname != "" {
		if err := syscall.Sethostname([]byte(spec.Hostname)); err != nil {
			return fmt.Errorf("set hostname: %w", err)
		}
	}
	if err := syscall.Chroot(spec.Root); err != nil {
		return fmt.Errorf("chroot %s: %w", spec.Root, err)
	}
	wd := spec.WorkDir
	if wd == "" {
		wd = "/"
	}
	if err := syscall.Chdir(wd); err != nil {
		return fmt.Errorf("chdir %s: %w", wd, err)
	}
	if err := becomeUser(spec.User); err != nil {
		return err
	}
	if len(spec.Argv) == 0 {
		return errors.New("container spec has no command")
	}
	err = syscall.Exec(spec.Argv[0], spec.Argv, spec.Env) //nolint:gosec // the container's own command
	return fmt.Errorf("exec %s: %w", spec.Argv[0], err)
}

func mountAll(spec *Spec) error {
	// Nothing mounted here may travel back to the agent's mount namespace.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if spec.ReadOnlyRoot {
		// The root becomes a mount of its own, made read-only once the volumes are on it.
		if err := syscall.Mount(spec.Root, spec.Root, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return fmt.Errorf("bind the root to itself: %w", err)
		}
	}
	mounts := make([]Mount, 0, len(devices)+len(spec.Mounts))
	for _, d := range devices {
		mounts = append(mounts, Mount{Source: "/dev/" + d, Target: "/dev/" + d})
	}
	for _, m := range append(mounts, spec.Mounts...) {
		target := filepath.Join(spec.Root, m.Target)
		if err := syscall.Mount(m.Source, target, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s to %s: %w", m.Source, m.Target, err)
		}
		if m.ReadOnly {
			if err := remountReadOnly(target); err != nil {
				return fmt.Errorf("make %s read-only: %w", m.Target, err)
			}
		}
	}
	if spec.ReadOnlyRoot {
		// Not recursive: the volumes and devices mounted on the root keep their modes.
		if err := remountReadOnly(spec.Root); err != nil {
			return fmt.Errorf("make the root read-only: %w", err)
		}
	}
	return nil
}

func remountReadOnly(target string) error {
	flags := uintptr(syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV) | lockedFlags(target)
	return syscall.Mount("", target, "", flags, "")
}

// safeSysctls are the sysctls the kubelet allows by default that belong to a pod's network
// namespace; any other is refused, as a kubelet refuses an unsafe sysctl it was not told to
// allow.
var safeSysctls = map[string]bool{
	"net.ipv4.ip_local_port_range":        true,
	"net.ipv4.ip_local_reserved_ports":    true,
	"net.ipv4.ip_unprivileged_port_start": true,
	"net.ipv4.ping_group_range":           true,
	"net.ipv4.tcp_syncookies":             true,
	"net.ipv4.tcp_keepalive_time":         true,
	"net.ipv4.tcp_keepalive_intvl":        true,
	"net.ipv4.tcp_keepalive_probes":       true,
	"net.ipv4.tcp_fin_timeout":            true,
	"net.ipv4.tcp_rmem":                   true,
	"net.ipv4.tcp_wmem":                   true,
}

// CheckSysctls refuses a sysctl the node does not set (not one of the kubelet's safe sysctls of
// the network namespace).
func CheckSysctls(sysctls map[string]string) error {
	for name := range sysctls {
		if !safeSysctls[name] {
			return fmt.Errorf("sysctl %s is not one of the safe sysctls of a pod's network namespace the node sets", name)
		}
	}
	return nil
}

// writeSysctls writes each sysctl under /proc/sys, which shows the values of the network
// namespace of the process that opens it: the pod's, joined just before.
func writeSysctls(sysctls map[string]string) error {
	if err := CheckSysctls(sysctls); err != nil {
		return err
	}
	for name, value := range sysctls {
		path := "/proc/sys/" + strings.ReplaceAll(name, ".", "/")
		if err := os.WriteFile(path, []byte(value), 0); err != nil {
			return fmt.Errorf("sysctl %s=%s: %w", name, value, err)
		}
	}
	return nil
}

// becomeUser sets the groups, group and user of the init, which then executes the container as
// them (Go's Setuid and Setgid apply to every thread).
func becomeUser(u *User) error {
	if u == nil {
		return nil
	}
	if u.SetGroups {
		groups := make([]int, 0, len(u.Groups))
		for _, g := range u.Groups {
			groups = append(groups, int(g))
		}
		if err := syscall.Setgroups(groups); err != nil {
			return fmt.Errorf("setgroups %v: %w", u.Groups, err)
		}
	}
	if err := syscall.Setgid(int(u.GID)); err != nil {
		return fmt.Errorf("setgid %d: %w", u.GID, err)
	}
	if err := syscall.Setuid(int(u.UID)); err != nil {
		return fmt.Errorf("setuid %d: %w", u.UID, err)
	}
	return nil
}

// lockedFlags are the flags of the mount holding path that a remount inside a user namespace
// must keep, or the kernel refuses it.
func lockedFlags(path string) uintptr {
	var st syscall.Statfs_t
	if syscall.Statfs(path, &st) != nil {
		return 0
	}
	const stNoExec = 8 // ST_NOEXEC; nosuid and nodev are always set
	if st.Flags&stNoExec != 0 {
		return syscall.MS_NOEXEC
	}
	return 0
}

func joinNetwork(path string) error {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open network namespace %s: %w", path, err)
	}
	defer syscall.Close(fd) //nolint:errcheck // read only
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("join network namespace %s: %w", path, err)
	}
	return nil
}

// Main runs the agent's binary as a pause process or container init when args name one of
// their verbs, and reports whether it did; it exits the process itself then.
func Main(args []string) bool {
	if len(args) < 2 {
		return false
	}
	switch args[1] {
	case VerbPause:
		os.Exit(pause())
	case VerbContainer:
		err := becomeContainer()
		fmt.Fprintf(os.Stderr, "container init: %v\n", err)
		os.Exit(128)
	}
	return false
}
