package volume

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// file is one file of a volume: its path relative to the volume's root, content and mode.
type file struct {
	data []byte
	mode os.FileMode
}

const dataLink = "..data"

// writeAtomic makes dir hold exactly files, switching from the previous content in one rename:
// the files live in a fresh ..<timestamp> directory, ..data links to it, and each top-level
// name links through ..data. Readers never see a half-written set. It does nothing when the
// content did not change.
func writeAtomic(dir string, files map[string]file) error {
	if same(dir, files) {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // a volume directory, readable as in a kubelet
		return fmt.Errorf("create volume directory: %w", err)
	}
	stamp, err := os.MkdirTemp(dir, ".."+time.Now().UTC().Format("2006_01_02_15_04_05."))
	if err != nil {
		return fmt.Errorf("create volume payload directory: %w", err)
	}
	_ = os.Chmod(stamp, 0o755) //nolint:gosec // readable as in a kubelet
	for _, name := range slices.Sorted(maps.Keys(files)) {
		f := files[name]
		path := filepath.Join(stamp, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil { //nolint:gosec // as above
			return fmt.Errorf("write volume file %s: %w", name, err)
		}
		if err := os.WriteFile(path, f.data, f.mode); err != nil {
			return fmt.Errorf("write volume file %s: %w", name, err)
		}
		_ = os.Chmod(path, f.mode) // the umask must not narrow a mode the pod asked for
	}
	old, _ := os.Readlink(filepath.Join(dir, dataLink))
	tmpLink := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmpLink)
	if err := os.Symlink(filepath.Base(stamp), tmpLink); err != nil {
		return fmt.Errorf("link volume payload: %w", err)
	}
	if err := os.Rename(tmpLink, filepath.Join(dir, dataLink)); err != nil {
		return fmt.Errorf("switch volume payload: %w", err)
	}
	if err := linkTopLevel(dir, files); err != nil {
		return err
	}
	if old != "" && old != filepath.Base(stamp) {
		_ = os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}

// linkTopLevel points every top-level name of files through ..data and removes the links of
// names that went away.
func linkTopLevel(dir string, files map[string]file) error {
	top := map[string]bool{}
	for name := range files {
		first, _, _ := strings.Cut(name, "/")
		top[first] = true
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list volume: %w", err)
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "..") && !top[e.Name()] {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	for name := range top {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join(dataLink, name), link); err != nil {
			return fmt.Errorf("link volume file %s: %w", name, err)
		}
	}
	return nil
}

// same reports whether dir already holds exactly files.
func same(dir string, files map[string]file) bool {
	payload := filepath.Join(dir, dataLink)
	if _, err := os.Stat(payload); err != nil {
		return false
	}
	n := 0
	err := filepath.WalkDir(payload+"/", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		rel, _ := filepath.Rel(payload, path)
		want, ok := files[rel]
		got, readErr := os.ReadFile(path) //nolint:gosec // the agent's own volume directory
		info, statErr := d.Info()
		if !ok || readErr != nil || statErr != nil || !bytes.Equal(got, want.data) || info.Mode().Perm() != want.mode.Perm() {
			return errChanged
		}
		return nil
	})
	return err == nil && n == len(files)
}

var errChanged = fmt.Errorf("volume changed")
