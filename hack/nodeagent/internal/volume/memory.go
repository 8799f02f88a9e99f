package volume

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/api/resource"
)

// mountMemory makes dir a tmpfs, as the kubelet does for an emptyDir with medium Memory (its
// content must not reach a disk: the proxy keeps listener keys there and checks). Root of a
// user namespace may mount a tmpfs in a mount namespace that namespace owns. A dir that is a
// tmpfs already is left alone.
func mountMemory(dir string, limit *resource.Quantity) error {
	if err := os.MkdirAll(dir, 0o777); err != nil { //nolint:gosec // an emptyDir is world-writable, as the kubelet makes it
		return err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", dir, err)
	}
	if st.Type == unix.TMPFS_MAGIC {
		return nil
	}
	opts := "mode=0777"
	if limit != nil && limit.Value() > 0 {
		opts += ",size=" + strconv.FormatInt(limit.Value(), 10)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount a tmpfs on %s: %w", dir, err)
	}
	return nil
}

// Unmount detaches every mount at or below dir (memory-backed emptyDirs), deepest first, so
// that dir can be removed.
func Unmount(dir string) error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("read mount table: %w", err)
	}
	dir = filepath.Clean(dir)
	var points []string
	s := bufio.NewScanner(bytes.NewReader(data))
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMountPoint(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmount %s: %w", p, err)
		}
	}
	return nil
}

// unescapeMountPoint undoes mountinfo's octal escapes (\040 for a space, ...).
func unescapeMountPoint(p string) string {
	if !strings.Contains(p, `\`) {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '\\' && i+3 < len(p) {
			if n, err := strconv.ParseUint(p[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(p[i])
	}
	return b.String()
}
