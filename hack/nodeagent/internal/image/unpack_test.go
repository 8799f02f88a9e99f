package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"k8s.io/utils/ptr"

	"coxswain.dev/coxswain/hack/nodeagent/internal/userns"
)

// entry is one tar entry of a test layer.
type entry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func layer(t *testing.T, entries ...entry) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, Size: int64(len(e.body))}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if h.Typeflag == tar.TypeChar {
			h.Devmajor, h.Devminor = 1, 3
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func imageOf(t *testing.T, cfg v1.Config, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config = "linux", runtime.GOARCH, cfg
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// tree lists what dir holds: path -> "dir MODE", "file MODE BODY" or "link TARGET".
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			out[rel] = "dir " + info.Mode().Perm().String()
		case d.Type()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			out[rel] = "link " + l
		default:
			b, _ := os.ReadFile(p) //nolint:gosec // the test's tree
			out[rel] = "file " + info.Mode().Perm().String() + " " + string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The refusals first: nothing may be written outside the root, and no device node inside it.
func TestUnpackRefusesEscapes(t *testing.T) {
	cases := []struct {
		name   string
		layers [][]entry
		want   string
	}{
		{"dot-dot name", [][]entry{{{name: "../outside", body: "x"}}}, "outside"},
		{"dot-dot inside a name", [][]entry{{{name: "etc/../../outside", body: "x"}}}, "outside"},
		{"write through an absolute symlink", [][]entry{
			{{name: "etc", typ: tar.TypeSymlink, link: "OUTSIDE"}},
			{{name: "etc/passwd", body: "root::0:0::/:/bin/sh\n"}},
		}, "leads outside the root"},
		{"write through a relative symlink to a parent", [][]entry{
			{{name: "up", typ: tar.TypeSymlink, link: "../../.."}, {name: "up/outside", body: "x"}},
		}, "leads outside the root"},
		{"hard link out of the root", [][]entry{{{name: "passwd", typ: tar.TypeLink, link: "../../etc/passwd"}}}, "leaves the root"},
		{"device node", [][]entry{{{name: "dev/mem", typ: tar.TypeChar}}}, "device node"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			outside := filepath.Join(base, "outside-dir")
			if err := os.Mkdir(outside, 0o700); err != nil {
				t.Fatal(err)
			}
			var layers []v1.Layer
			for _, l := range tc.layers {
				for i := range l {
					l[i].link = strings.ReplaceAll(l[i].link, "OUTSIDE", outside)
				}
				layers = append(layers, layer(t, l...))
			}
			root := filepath.Join(base, "a", "b", "root")
			if err := os.MkdirAll(filepath.Dir(root), 0o700); err != nil {
				t.Fatal(err)
			}
			err := Unpack(imageOf(t, v1.Config{}, layers...), root)
			if err == nil {
				t.Fatalf("Unpack succeeded; root holds %v", tree(t, root))
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if got := tree(t, outside); len(got) != 0 {
				t.Errorf("written outside the root: %v", got)
			}
			for _, p := range []string{filepath.Join(base, "outside"), filepath.Join(base, "a", "outside"), filepath.Join(base, "a", "b", "outside")} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s written outside the root", p)
				}
			}
			if tc.name == "device node" && !errors.Is(err, ErrUnsafe) {
				t.Errorf("error %v is not ErrUnsafe", err)
			}
		})
	}
}

func TestUnpackLayersInOrderWithWhiteouts(t *testing.T) {
	img := imageOf(t, v1.Config{},
		layer(t,
			entry{name: "etc", typ: tar.TypeDir},
			entry{name: "etc/motd", body: "first"},
			entry{name: "etc/removed", body: "gone"},
			entry{name: "keep/a", body: "a"},
			entry{name: "opaque/old", body: "old"},
			entry{name: "opaque/sub/deep", body: "deep"},
			entry{name: "bin/tool", body: "#!", mode: 0o4755},
			entry{name: "tmp", typ: tar.TypeDir, mode: 0o1777},
		),
		layer(t,
			entry{name: "etc/motd", body: "second"},
			entry{name: "etc/.wh.removed"},
			entry{name: "opaque/.wh..wh..opq"},
			entry{name: "opaque/new", body: "new"},
			entry{name: "bin/alias", typ: tar.TypeSymlink, link: "/bin/tool"},
			entry{name: "bin/hard", typ: tar.TypeLink, link: "bin/tool"},
		),
		layer(t, entry{name: "./keep/b", body: "b"}),
	)
	root := filepath.Join(t.TempDir(), "root")
	if err := Unpack(img, root); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"etc":        "dir -rwxr-xr-x",
		"etc/motd":   "file -rw-r--r-- second",
		"keep":       "dir -rwxr-xr-x",
		"keep/a":     "file -rw-r--r-- a",
		"keep/b":     "file -rw-r--r-- b",
		"opaque":     "dir -rwxr-xr-x",
		"opaque/new": "file -rw-r--r-- new",
		"bin":        "dir -rwxr-xr-x",
		"bin/tool":   "file -rwxr-xr-x #!", // no set-user-ID bit
		"bin/hard":   "file -rwxr-xr-x #!",
		"bin/alias":  "link /bin/tool",
		"tmp":        "dir -rwxrwxrwx",
	}
	if diff := cmp.Diff(want, tree(t, root)); diff != "" {
		t.Errorf("root (-want +got):\n%s", diff)
	}
	st, err := os.Stat(filepath.Join(root, "tmp"))
	if err != nil || st.Mode()&fs.ModeSticky == 0 {
		t.Errorf("/tmp lost its sticky bit: %v %v", st.Mode(), err)
	}
	a, _ := os.Stat(filepath.Join(root, "bin/tool"))
	b, _ := os.Stat(filepath.Join(root, "bin/hard"))
	if !os.SameFile(a, b) {
		t.Error("bin/hard is not a hard link of bin/tool")
	}
}

// serve pushes img to a registry served in process and returns its host:port.
func serve(t *testing.T, repo string, img v1.Image) (string, name.Digest) {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	ref, err := name.ParseReference(u.Host+"/"+repo+":dev", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return u.Host, ref.Context().Digest(d.String())
}

func TestStorePullsAndAppliesTheConfig(t *testing.T) {
	passwd := "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65533:nonroot:/home/nonroot:/sbin/nologin\n"
	group := "root:x:0:\nnonroot:x:65533:\nextra:x:700:\n"
	files := layer(t, entry{name: "etc/passwd", body: passwd}, entry{name: "etc/group", body: group}, entry{name: "app", body: "ELF", mode: 0o755})
	cfg := v1.Config{User: "nonroot", Entrypoint: []string{"/app", "--serve"}, Cmd: []string{"--port=80"}, Env: []string{"PATH=/bin", "MODE=image"}, WorkingDir: "/home/nonroot"}
	host, digest := serve(t, "team/app", imageOf(t, cfg, files))

	s, err := NewStore(t.TempDir(), map[string]string{"coxswain.dev": host})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Serves("coxswain.dev/team/app:dev") || s.Serves("registry.k8s.io/pause:3.10") {
		t.Error("Serves: wrong registries")
	}
	img, err := s.Pull(t.Context(), "coxswain.dev/team/app:dev@"+digest.DigestStr())
	if err != nil {
		t.Fatal(err)
	}
	if img.Digest != digest.DigestStr() {
		t.Errorf("digest %s, want %s", img.Digest, digest.DigestStr())
	}
	again, err := s.Pull(t.Context(), "coxswain.dev/team/app:dev")
	if err != nil {
		t.Fatal(err)
	}
	if again.Root != img.Root {
		t.Errorf("the tag and the digest unpacked twice: %s, %s", img.Root, again.Root)
	}
	if _, err := s.Pull(t.Context(), "coxswain.dev/team/other:dev"); !errors.Is(err, ErrNotFound) {
		t.Errorf("an image the registry lacks: %v, want ErrNotFound", err)
	}

	if diff := cmp.Diff([]string{"/app", "--serve", "--port=80"}, img.Command(nil, nil)); diff != "" {
		t.Errorf("entrypoint and cmd (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"/app", "--serve", "-v"}, img.Command(nil, []string{"-v"})); diff != "" {
		t.Errorf("args replace cmd (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"/other", "-v"}, img.Command([]string{"/other"}, []string{"-v"})); diff != "" {
		t.Errorf("command replaces entrypoint and cmd (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"PATH=/bin", "MODE=pod", "X=1"}, img.Env([]string{"MODE=pod", "X=1"})); diff != "" {
		t.Errorf("environment (-want +got):\n%s", diff)
	}
	if img.WorkDir("") != "/home/nonroot" || img.WorkDir("/srv") != "/srv" {
		t.Errorf("working directory: %q, %q", img.WorkDir(""), img.WorkDir("/srv"))
	}
	for _, tc := range []struct {
		user          string
		runAs, runAsG *int64
		uid, gid      uint32
		wantErr       string
	}{
		{user: "nonroot", uid: 65532, gid: 65533},
		{user: "nonroot:extra", uid: 65532, gid: 700},
		{user: "65532:65532", uid: 65532, gid: 65532},
		{user: "65532", uid: 65532, gid: 65533}, // the passwd entry's group
		{user: "", uid: 0, gid: 0},
		{user: "nonroot", runAs: ptr.To[int64](1000), uid: 1000, gid: 0},
		{user: "nonroot", runAs: ptr.To[int64](1000), runAsG: ptr.To[int64](2000), uid: 1000, gid: 2000},
		{user: "nobody", wantErr: `user "nobody": no matching entries in passwd file`},
		{user: "nonroot:wheel", wantErr: `group "wheel": no matching entries in group file`},
	} {
		i := *img
		i.Config.User = tc.user
		uid, gid, err := i.User(tc.runAs, tc.runAsG)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("user %q: error %v, want %q", tc.user, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("user %q: %v", tc.user, err)
		case uid != tc.uid || gid != tc.gid:
			t.Errorf("user %q runAs %v/%v: %d:%d, want %d:%d", tc.user, tc.runAs, tc.runAsG, uid, gid, tc.uid, tc.gid)
		}
	}

	dst := filepath.Join(t.TempDir(), "root")
	if err := img.Copy(dst); err != nil {
		t.Fatal(err)
	}
	got := tree(t, dst)
	if got["app"] != "file -rwxr-xr-x ELF" || got["etc/passwd"] != "file -rw-r--r-- "+passwd {
		t.Errorf("copy of the root: %v", got)
	}
	if err := os.WriteFile(filepath.Join(dst, "app"), []byte("changed"), 0o755); err != nil { //nolint:gosec // a test file
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(img.Root, "app")); string(b) != "ELF" {
		t.Errorf("writing a container's copy changed the cache: %q", b)
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range got {
			if !yield(k) {
				return
			}
		}
	})
	if diff := cmp.Diff([]string{"app", "etc", "etc/group", "etc/passwd"}, names); diff != "" {
		t.Errorf("copy (-want +got):\n%s", diff)
	}
}

// Tests that unpacking keeps the owners of the layers' entries where this user namespace maps
// them, and that a container's copy of the root keeps them with the modes.
func TestUnpackAndCopyKeepOwners(t *testing.T) {
	const nonroot = 65532
	if !userns.Mapped(nonroot, nonroot) {
		t.Skipf("this user namespace maps no uid %d", nonroot)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "home/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "home/app/", Typeflag: tar.TypeDir, Mode: 0o700, Uid: nonroot, Gid: nonroot},
		{Name: "home/app/key", Typeflag: tar.TypeReg, Mode: 0o600, Uid: nonroot, Gid: 7, Size: 1},
		{Name: "home/app/link", Typeflag: tar.TypeSymlink, Linkname: "key", Uid: nonroot, Gid: nonroot},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			_, _ = tw.Write([]byte("k"))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img := imageOf(t, v1.Config{}, l)
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	if err := Unpack(img, root); err != nil {
		t.Fatal(err)
	}
	owners := func(root string) map[string]string {
		out := map[string]string{}
		for _, p := range []string{"home", "home/app", "home/app/key", "home/app/link"} {
			st, err := os.Lstat(filepath.Join(root, p))
			if err != nil {
				t.Fatal(err)
			}
			sys := st.Sys().(*syscall.Stat_t)
			out[p] = fmt.Sprintf("%d:%d %v", sys.Uid, sys.Gid, st.Mode().Perm())
		}
		return out
	}
	want := map[string]string{
		"home":          "0:0 -rwxr-xr-x",
		"home/app":      "65532:65532 -rwx------",
		"home/app/key":  "65532:7 -rw-------",
		"home/app/link": "65532:65532 -rwxrwxrwx",
	}
	if diff := cmp.Diff(want, owners(root)); diff != "" {
		t.Errorf("unpacked owners (-want +got):\n%s", diff)
	}
	copied := filepath.Join(dir, "copy")
	if err := (&Image{Root: root}).Copy(copied); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, owners(copied)); diff != "" {
		t.Errorf("copied owners (-want +got):\n%s", diff)
	}
}
