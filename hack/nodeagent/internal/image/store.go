package image

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"golang.org/x/sys/unix"
)

// ErrNotFound reports an image its registry does not hold.
var ErrNotFound = errors.New("image: not in the registry")

// Image is an image pulled and unpacked on the node.
type Image struct {
	// Ref is the reference it was pulled by; Digest the digest of its manifest for this
	// node's platform, which names it in the cache.
	Ref, Digest string
	// Root is the unpacked root filesystem, shared by every container of the image: a
	// container gets a copy.
	Root   string
	Config v1.Config
}

// Store pulls images from the registries it is given and keeps each one unpacked once, by
// digest, under its directory.
type Store struct {
	dir      string
	mirrors  map[string]string
	platform v1.Platform
	// Options are added to every registry request (tests give a transport).
	Options []remote.Option

	mu    sync.Mutex
	locks map[string]*sync.Mutex // per digest, while it unpacks
}

// NewStore returns a store caching under dir that pulls images of each registry named in
// mirrors (as image references name it, coxswain.dev) from the host:port it maps to, over
// plain HTTP: the registry the cluster serves inside its namespaces.
func NewStore(dir string, mirrors map[string]string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("image cache: %w", err)
	}
	return &Store{dir: dir, mirrors: mirrors, platform: v1.Platform{OS: "linux", Architecture: runtime.GOARCH}, locks: map[string]*sync.Mutex{}}, nil
}

// Serves reports whether ref names a registry the store pulls from.
func (s *Store) Serves(ref string) bool {
	if s == nil {
		return false
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return false
	}
	_, ok := s.mirrors[r.Context().RegistryStr()]
	return ok
}

// Pull returns the image ref names, unpacked, pulling it when its digest is not cached. A
// reference pinning a digest is pulled by that digest (an image index's digest selects this
// node's platform in it); a tag is resolved at each pull.
func (s *Store) Pull(ctx context.Context, ref string) (*Image, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", ref, err)
	}
	mirror, ok := s.mirrors[r.Context().RegistryStr()]
	if !ok {
		return nil, fmt.Errorf("%w: %s: no registry for %s", ErrNotFound, ref, r.Context().RegistryStr())
	}
	repo, err := name.NewRepository(mirror+"/"+r.Context().RepositoryStr(), name.Insecure)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", ref, err)
	}
	var from name.Reference = repo.Tag(r.Identifier())
	if d, ok := r.(name.Digest); ok {
		from = repo.Digest(d.DigestStr())
	}
	opts := append([]remote.Option{remote.WithContext(ctx), remote.WithPlatform(s.platform)}, s.Options...)
	desc, err := remote.Get(from, opts...)
	if err != nil {
		var te *transport.Error
		if errors.As(err, &te) && te.StatusCode == http.StatusNotFound {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, ref)
		}
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	img, err := desc.Image()
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("pull %s: config: %w", ref, err)
	}
	if cf.OS != "" && (cf.OS != s.platform.OS || cf.Architecture != s.platform.Architecture) {
		return nil, fmt.Errorf("pull %s: the image is for %s/%s, the node is %s/%s", ref, cf.OS, cf.Architecture, s.platform.OS, s.platform.Architecture)
	}
	root, err := s.unpacked(img, digest)
	if err != nil {
		return nil, fmt.Errorf("unpack %s: %w", ref, err)
	}
	return &Image{Ref: ref, Digest: digest.String(), Root: root, Config: cf.Config}, nil
}

// unpacked returns the cached root of the image of digest, unpacking it first if needed.
func (s *Store) unpacked(img v1.Image, digest v1.Hash) (string, error) {
	key := digest.Algorithm + "-" + digest.Hex
	s.mu.Lock()
	l, ok := s.locks[key]
	if !ok {
		l = &sync.Mutex{}
		s.locks[key] = l
	}
	s.mu.Unlock()
	l.Lock()
	defer l.Unlock()
	final := filepath.Join(s.dir, key)
	root := filepath.Join(final, "rootfs")
	if _, err := os.Stat(root); err == nil {
		return root, nil
	}
	tmp, err := os.MkdirTemp(s.dir, ".unpack-")
	if err != nil {
		return "", err
	}
	if err := Unpack(img, filepath.Join(tmp, "rootfs")); err != nil {
		return "", errors.Join(err, os.RemoveAll(tmp))
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", errors.Join(err, os.RemoveAll(tmp))
	}
	return root, nil
}

// Command is the container's argv as the kubelet makes it: the container's command, else the
// image's entrypoint; then the container's args, or the image's cmd when the container gives
// neither command nor args.
func (img *Image) Command(command, args []string) []string {
	if len(command) > 0 {
		return append(append([]string(nil), command...), args...)
	}
	argv := append([]string(nil), img.Config.Entrypoint...)
	if len(args) > 0 {
		return append(argv, args...)
	}
	return append(argv, img.Config.Cmd...)
}

// User is the user and group the container runs as: runAsUser and runAsGroup when given,
// else the image's user (`uid`, `name`, `uid:gid`, `name:group`; names looked up in the
// image's /etc/passwd and /etc/group); a user without a group takes its passwd entry's group,
// or 0. A name the image's files do not hold is an error, as with any runtime.
func (img *Image) User(runAsUser, runAsGroup *int64) (uid, gid uint32, err error) {
	spec := img.Config.User
	userPart, groupPart, hasGroup := strings.Cut(spec, ":")
	gidKnown := false
	switch {
	case runAsUser != nil:
		uid = uint32(*runAsUser) //nolint:gosec // validated by the API server as a non-negative int32
	case userPart == "":
	default:
		if n, err := strconv.ParseUint(userPart, 10, 32); err == nil {
			uid = uint32(n)
			break
		}
		entry, err := lookup(img.Root, "etc/passwd", userPart, 0)
		if err != nil {
			return 0, 0, fmt.Errorf("image %s: user %q: %w", img.Ref, userPart, err)
		}
		uid, gid, gidKnown = entry[2], entry[3], true
	}
	switch {
	case runAsGroup != nil:
		return uid, uint32(*runAsGroup), nil //nolint:gosec // as above
	case hasGroup && runAsUser == nil:
		if n, err := strconv.ParseUint(groupPart, 10, 32); err == nil {
			return uid, uint32(n), nil
		}
		entry, err := lookup(img.Root, "etc/group", groupPart, 0)
		if err != nil {
			return 0, 0, fmt.Errorf("image %s: group %q: %w", img.Ref, groupPart, err)
		}
		return uid, entry[2], nil
	case gidKnown:
		return uid, gid, nil
	}
	if entry, err := lookup(img.Root, "etc/passwd", "", uid); err == nil {
		return uid, entry[3], nil
	}
	return uid, 0, nil
}

// NonNumericUser reports whether the image names its user by name, which runAsNonRoot
// cannot verify (the kubelet refuses such a container).
func (img *Image) NonNumericUser() bool {
	u, _, _ := strings.Cut(img.Config.User, ":")
	if u == "" {
		return false
	}
	_, err := strconv.ParseUint(u, 10, 32)
	return err != nil
}

var errNoEntry = errors.New("no matching entries in passwd file")

// lookup finds the entry of name (or, with name empty, of id) in the colon-separated file of
// the image's root, read without leaving the root; fields 2 and 3 are returned as numbers.
func lookup(root, file, nameWanted string, id uint32) (map[int]uint32, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, err
	}
	defer r.Close() //nolint:errcheck // read only
	f, err := r.Open(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w (the image has no /%s)", noEntry(file), file)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close() //nolint:errcheck // read only
	s := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for s.Scan() {
		fields := strings.Split(s.Text(), ":")
		if len(fields) < 3 {
			continue
		}
		n2, err := strconv.ParseUint(fields[2], 10, 32)
		if err != nil {
			continue
		}
		out := map[int]uint32{2: uint32(n2)}
		if len(fields) > 3 {
			if n3, err := strconv.ParseUint(fields[3], 10, 32); err == nil {
				out[3] = uint32(n3)
			}
		}
		if (nameWanted != "" && fields[0] == nameWanted) || (nameWanted == "" && uint32(n2) == id) {
			return out, nil
		}
	}
	return nil, noEntry(file)
}

func noEntry(file string) error {
	if strings.HasSuffix(file, "group") {
		return errors.New("no matching entries in group file")
	}
	return errNoEntry
}

// Env is the container's environment: the image's variables, then the container's, a
// container's variable replacing the image's of the same name.
func (img *Image) Env(container []string) []string {
	seen := map[string]bool{}
	for _, kv := range container {
		n, _, _ := strings.Cut(kv, "=")
		seen[n] = true
	}
	var out []string
	for _, kv := range img.Config.Env {
		n, _, _ := strings.Cut(kv, "=")
		if !seen[n] {
			out = append(out, kv)
		}
	}
	return append(out, container...)
}

// WorkDir is the container's working directory, else the image's.
func (img *Image) WorkDir(container string) string {
	if container != "" {
		return container
	}
	return img.Config.WorkingDir
}

// Copy writes a copy of the image's root filesystem into dst, which must not exist: files
// are copied (the kernel may share their blocks), links and directories recreated with their
// owners and modes, so that a container writing to its root changes only its own.
func (img *Image) Copy(dst string) error {
	return filepath.WalkDir(img.Root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := img.copyEntry(dst, p, d); err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok || (st.Uid == 0 && st.Gid == 0) {
			return nil
		}
		rel, _ := filepath.Rel(img.Root, p)
		target := filepath.Join(dst, rel)
		if err := os.Lchown(target, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		// chown may clear mode bits: set them again.
		return os.Chmod(target, info.Mode()&(fs.ModePerm|fs.ModeSticky))
	})
}

// copyEntry recreates one entry of the image's root under dst.
func (img *Image) copyEntry(dst, p string, d fs.DirEntry) error {
	rel, err := filepath.Rel(img.Root, p)
	if err != nil {
		return err
	}
	target := filepath.Join(dst, rel)
	info, err := d.Info()
	if err != nil {
		return err
	}
	switch {
	case d.IsDir():
		if err := os.Mkdir(target, 0o700); err != nil {
			return err
		}
		return os.Chmod(target, info.Mode()&(fs.ModePerm|fs.ModeSticky))
	case d.Type()&fs.ModeSymlink != 0:
		link, err := os.Readlink(p)
		if err != nil {
			return err
		}
		return os.Symlink(link, target)
	case d.Type().IsRegular():
		return copyRegular(p, target, info.Mode().Perm())
	case d.Type()&fs.ModeNamedPipe != 0:
		return unix.Mkfifo(target, uint32(info.Mode().Perm()))
	}
	return fmt.Errorf("copy %s: unexpected file type %s", rel, d.Type())
}

func copyRegular(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src) //nolint:gosec // the image cache
	if err != nil {
		return err
	}
	defer in.Close()                                                      //nolint:errcheck // read only
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode) //nolint:gosec // a fresh root
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		return errors.Join(err, out.Close())
	}
	return errors.Join(out.Chmod(mode), out.Close())
}
