package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"coxswain.dev/coxswain/hack/nodeagent/internal/userns"
)

// ErrUnsafe reports an image whose layers would write outside its root filesystem or create
// what a container's root may not hold (device nodes).
var ErrUnsafe = errors.New("image: unsafe layer entry")

// The whiteout names of the OCI image layer format.
const (
	whiteoutPrefix = ".wh."
	opaqueWhiteout = ".wh..wh..opq"
)

// Unpack writes the root filesystem of img into dir, which must not exist yet, applying its
// layers in order as the OCI image spec says: a later layer's entry replaces what the layers
// below hold at its path (directories merge), a whiteout `.wh.NAME` removes NAME of the layers
// below, an opaque whiteout `.wh..wh..opq` everything the layers below hold in its directory.
// Every path is resolved inside dir (os.Root): symbolic links are followed as the container
// would see them, and an entry whose name, link or hard link target would lead outside the
// root (a `..` too many, an absolute symbolic link written through) is refused with ErrUnsafe,
// as are device nodes. Owners are kept where the node's user namespace maps them (a cluster
// started by root maps 65,536 ids); an owner it does not map leaves the entry to its root.
// Modes are kept without the set-user-ID and set-group-ID bits.
func Unpack(img v1.Image, dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil { //nolint:gosec // an image's root is world-readable
		return fmt.Errorf("create root: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close() //nolint:errcheck // a directory handle
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("layers: %w", err)
	}
	for i, l := range layers {
		if err := unpackLayer(root, l); err != nil {
			return fmt.Errorf("layer %d: %w", i+1, err)
		}
	}
	return nil
}

func unpackLayer(root *os.Root, l v1.Layer) (err error) {
	rc, err := l.Uncompressed()
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, rc.Close()) }()
	u := unpacker{root: root, created: map[string]bool{}}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		if err := u.entry(h, tr); err != nil {
			return err
		}
	}
	// Read to the end, so the layer's digest is verified.
	if _, err := io.Copy(io.Discard, rc); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	return nil
}

// unpacker applies one layer.
type unpacker struct {
	root *os.Root
	// created holds the paths this layer wrote, which its own whiteouts leave alone.
	created map[string]bool
}

// clean returns the entry's name relative to the root, refusing one that leaves it.
func clean(name string) (string, error) {
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", fmt.Errorf("%w: %q leaves the root", ErrUnsafe, name)
		}
	}
	n := path.Clean("/" + name)
	return strings.TrimPrefix(n, "/"), nil
}

// perm is the entry's permission bits and sticky bit; set-user-ID and set-group-ID go.
func perm(h *tar.Header) fs.FileMode {
	mode := fs.FileMode(h.Mode & 0o777) //nolint:gosec // masked
	if h.Mode&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// unsafe names the refusal of an operation that os.Root refused for leaving the root.
func unsafe(what, name string, err error) error {
	if err != nil && (strings.Contains(err.Error(), "escapes") || errors.Is(err, fs.ErrInvalid)) {
		return fmt.Errorf("%w: %s %q leads outside the root: %w", ErrUnsafe, what, name, err)
	}
	return fmt.Errorf("%s %q: %w", what, name, err)
}

func (u *unpacker) entry(h *tar.Header, body io.Reader) error {
	rel, err := clean(h.Name)
	if err != nil {
		return err
	}
	base, dir := path.Base(rel), path.Dir(rel)
	if rel == "" {
		if h.Typeflag == tar.TypeDir {
			return nil // the root itself
		}
		return fmt.Errorf("%w: the root is not a directory (%q)", ErrUnsafe, h.Name)
	}
	if base == opaqueWhiteout {
		return u.opaque(dir)
	}
	if strings.HasPrefix(base, whiteoutPrefix) {
		victim := path.Join(dir, strings.TrimPrefix(base, whiteoutPrefix))
		if u.created[victim] {
			return nil
		}
		if err := u.root.RemoveAll(victim); err != nil {
			return unsafe("whiteout", h.Name, err)
		}
		return nil
	}
	if dir != "." {
		if err := u.root.MkdirAll(dir, 0o755); err != nil {
			return unsafe("directory of", h.Name, err)
		}
	}
	mode := perm(h)
	existing, statErr := u.root.Lstat(rel)
	if statErr != nil && !errors.Is(statErr, fs.ErrNotExist) {
		return unsafe("entry", h.Name, statErr)
	}
	exists := statErr == nil
	if h.Typeflag == tar.TypeDir && exists && existing.IsDir() {
		u.created[rel] = true
		return errors.Join(u.chown(rel, h), u.chmod(rel, mode))
	}
	if exists { // an entry of this layer replaces the lower layers'
		if err := u.root.RemoveAll(rel); err != nil {
			return unsafe("entry", h.Name, err)
		}
	}
	u.created[rel] = true
	switch h.Typeflag {
	case tar.TypeDir:
		if err := u.root.Mkdir(rel, 0o700); err != nil {
			return unsafe("directory", h.Name, err)
		}
		return errors.Join(u.chown(rel, h), u.chmod(rel, mode))
	case tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // old archives write TypeRegA
		f, err := u.root.OpenFile(rel, os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return unsafe("file", h.Name, err)
		}
		if _, err := io.Copy(f, body); err != nil { //nolint:gosec // sizes are the layer's, bounded by its digest
			return errors.Join(fmt.Errorf("write %q: %w", h.Name, err), f.Close())
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("write %q: %w", h.Name, err)
		}
		return errors.Join(u.chown(rel, h), u.chmod(rel, mode)) // chown first: it may clear mode bits
	case tar.TypeSymlink:
		if err := u.root.Symlink(h.Linkname, rel); err != nil {
			return unsafe("symbolic link", h.Name, err)
		}
		return u.chown(rel, h)
	case tar.TypeLink:
		src, err := clean(h.Linkname)
		if err != nil || src == "" {
			return fmt.Errorf("%w: hard link %q to %q leaves the root", ErrUnsafe, h.Name, h.Linkname)
		}
		if err := u.root.Link(src, rel); err != nil {
			return unsafe("hard link", h.Name+" -> "+h.Linkname, err)
		}
		return nil
	case tar.TypeFifo:
		if err := u.mkfifo(rel, mode); err != nil {
			return unsafe("fifo", h.Name, err)
		}
		return u.chown(rel, h)
	case tar.TypeChar, tar.TypeBlock:
		return fmt.Errorf("%w: %q is a device node (%d:%d): a container's devices come from the node", ErrUnsafe, h.Name, h.Devmajor, h.Devminor)
	default:
		return fmt.Errorf("%w: %q has the unsupported tar type %q", ErrUnsafe, h.Name, string(h.Typeflag))
	}
}

// chown gives the entry its owner when the node's user namespace maps it; the entry stays the
// namespace root's otherwise. Symbolic links are not followed.
func (u *unpacker) chown(rel string, h *tar.Header) error {
	if h.Uid < 0 || h.Gid < 0 || h.Uid > math.MaxUint32 || h.Gid > math.MaxUint32 || (h.Uid == 0 && h.Gid == 0) {
		return nil
	}
	if !userns.Mapped(uint32(h.Uid), uint32(h.Gid)) { //nolint:gosec // range checked above
		return nil
	}
	if err := u.root.Lchown(rel, h.Uid, h.Gid); err != nil {
		return unsafe("owner of", rel, err)
	}
	return nil
}

func (u *unpacker) chmod(rel string, mode fs.FileMode) error {
	if err := u.root.Chmod(rel, mode); err != nil {
		return unsafe("mode of", rel, err)
	}
	return nil
}

// opaque removes what the layers below hold in dir.
func (u *unpacker) opaque(dir string) error {
	if dir != "." {
		if err := u.root.MkdirAll(dir, 0o755); err != nil {
			return unsafe("opaque directory", dir, err)
		}
	}
	f, err := u.root.Open(dir)
	if err != nil {
		return unsafe("opaque directory", dir, err)
	}
	names, err := f.Readdirnames(-1)
	_ = f.Close()
	if err != nil {
		return fmt.Errorf("opaque directory %q: %w", dir, err)
	}
	for _, n := range names {
		p := path.Join(dir, n)
		if u.created[p] {
			continue
		}
		if err := u.root.RemoveAll(p); err != nil {
			return unsafe("opaque directory", dir, err)
		}
	}
	return nil
}

// mkfifo creates a named pipe inside the root: os.Root has no Mkfifo, so it is made in the
// resolved parent directory through its descriptor.
func (u *unpacker) mkfifo(rel string, mode fs.FileMode) error {
	d, err := u.root.Open(path.Dir(rel))
	if err != nil {
		return err
	}
	defer d.Close() //nolint:errcheck // read only
	return unix.Mkfifoat(int(d.Fd()), path.Base(rel), uint32(mode.Perm()))
}
