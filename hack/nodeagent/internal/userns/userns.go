// Package userns tells which user and group ids the user namespace the node runs in maps: a
// cluster started by root maps the first 65,536 (so containers run as their image's user and
// files keep their layers' owners), one started by another user maps only its root.
package userns

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// idRange is one line of /proc/self/uid_map or gid_map: ids inside [first, first+count).
type idRange struct{ first, count uint64 }

func (r idRange) holds(id uint32) bool {
	return uint64(id) >= r.first && uint64(id) < r.first+r.count
}

// parse reads a uid_map or gid_map: "inside outside count" lines.
func parse(data []byte) []idRange {
	var out []idRange
	s := bufio.NewScanner(bytes.NewReader(data))
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) != 3 {
			continue
		}
		first, err1 := strconv.ParseUint(f[0], 10, 32)
		count, err2 := strconv.ParseUint(f[2], 10, 32)
		if err1 == nil && err2 == nil {
			out = append(out, idRange{first, count})
		}
	}
	return out
}

func mapped(ranges []idRange, id uint32) bool {
	for _, r := range ranges {
		if r.holds(id) {
			return true
		}
	}
	return false
}

var maps = sync.OnceValues(func() ([]idRange, []idRange) {
	uids, _ := os.ReadFile("/proc/self/uid_map")
	gids, _ := os.ReadFile("/proc/self/gid_map")
	return parse(uids), parse(gids)
})

// Mapped reports whether this process's user namespace maps uid and gid.
func Mapped(uid, gid uint32) bool {
	uids, gids := maps()
	return mapped(uids, uid) && mapped(gids, gid)
}

// GroupMapped reports whether this process's user namespace maps gid.
func GroupMapped(gid uint32) bool {
	_, gids := maps()
	return mapped(gids, gid)
}

// SetgroupsAllowed reports whether setgroups is allowed in this user namespace (it is denied in
// one whose gid_map an unprivileged user wrote).
func SetgroupsAllowed() bool {
	data, err := os.ReadFile("/proc/self/setgroups")
	return err != nil || strings.TrimSpace(string(data)) != "deny"
}

// MappedIDs is how many user and group ids a cluster's user namespace maps when root starts it:
// 0 to 65535 onto the same ids outside, so that containers run as their images' users (65532)
// and image files keep their owners. Another user can map only itself, as the namespace's root.
const MappedIDs = 65536

// Attrs starts a process in new namespaces: a user namespace mapping the caller to its root
// (and, when the caller is root, the ids below MappedIDs), a network namespace with nothing but
// a loopback, a PID namespace whose PID 1 it is, and a mount namespace of its own, where it
// calls MountProc. The process is killed when its parent dies, which takes the whole PID
// namespace down.
func Attrs() *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS,
		Pdeathsig:  syscall.SIGKILL,
	}
	if os.Geteuid() == 0 {
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: MappedIDs}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: MappedIDs}}
		attr.GidMappingsEnableSetgroups = true
		return attr
	}
	attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
	attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	return attr
}

// MountProc makes every mount of the mount namespace private (nothing mounted there travels
// out) and mounts the /proc of the PID namespace: the process Attrs started calls it first.
func MountProc() error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	return nil
}
