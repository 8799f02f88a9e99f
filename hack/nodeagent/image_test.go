package main

import (
	"archive/tar"
	"bytes"
	"cmp"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"coxswain.dev/coxswain/hack/nodeagent/internal/userns"
)

const (
	// registryName is the registry the agent pulls from the test's registry (--registry).
	registryName    = "registry.test"
	imagesNamespace = "agent-images"
	// imageUser is the user the test image runs as, distroless's nonroot as in ours.
	imageUser = 65532
)

// tarFile is one entry of a test layer: a directory when body is nil and dir is set.
type tarFile struct {
	name string
	dir  bool
	mode int64
	uid  int
	body []byte
}

func testLayer(t *testing.T, files ...tarFile) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.uid, Typeflag: tar.TypeReg, Size: int64(len(f.body))}
		if f.dir {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(f.body); err != nil {
			t.Fatal(err)
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

// pushTestImage pushes an image index holding the test server for this node's platform, in
// two layers (the second whites out a file of the first), as registry.test/<repo>:v1, and
// returns the reference pinned to the index's digest.
func pushTestImage(t *testing.T, c *cluster, repo string) string {
	t.Helper()
	server, err := os.ReadFile(os.Getenv(envServer))
	if err != nil {
		t.Fatal(err)
	}
	base := testLayer(t,
		tarFile{name: "etc/", dir: true, mode: 0o755},
		tarFile{name: "etc/passwd", mode: 0o644, body: []byte("root:x:0:0:root:/root:/sbin/nologin\n")},
		tarFile{name: "etc/hosts", mode: 0o644, body: []byte("# the image's own, which the pod's replaces\n")},
		tarFile{name: "srv/", dir: true, mode: 0o755},
		tarFile{name: "srv/stale", mode: 0o644, body: []byte("removed by the next layer")},
		tarFile{name: "home/", dir: true, mode: 0o755},
		tarFile{name: "home/app/", dir: true, mode: 0o700, uid: imageUser},
		tarFile{name: "home/app/note", mode: 0o600, uid: imageUser, body: []byte("only the image's user reads this")},
	)
	app := testLayer(t,
		tarFile{name: "usr/", dir: true, mode: 0o755},
		tarFile{name: "usr/bin/", dir: true, mode: 0o755},
		tarFile{name: "usr/bin/testserver", mode: 0o755, body: server},
		tarFile{name: "srv/.wh.stale", mode: 0o644},
		tarFile{name: "srv/fresh", mode: 0o644, body: []byte("from the second layer")},
	)
	img, err := mutate.AppendLayers(empty.Image, base, app)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config = v1.Config{
		Entrypoint: []string{"testserver"}, // found through the image's PATH
		Cmd:        []string{"-listen=:8080"},
		Env:        []string{"PATH=/usr/bin", "FROM_IMAGE=image", "OVERRIDDEN=image"},
		WorkingDir: "/srv",
		User:       fmt.Sprintf("%d:%d", imageUser, imageUser),
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), mutate.IndexAddendum{
		Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}},
	})
	tag, err := name.NewTag(c.registry+"/"+repo+":v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(tag, idx, remote.WithContext(t.Context())); err != nil {
		t.Fatal(err)
	}
	digest, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return registryName + "/" + repo + ":v1@" + digest.String()
}

// Tests that a container whose image the image map does not name is pulled from the registry
// the agent serves its name from, by the digest its reference pins (an image index, this node's
// platform chosen), and runs as the image says: its layers applied in order (a whiteout
// honoured), its entrypoint and cmd found through its PATH, its environment under the
// container's, its working directory, the pod's /etc/hosts; the status names the image by
// that digest.
func TestAgentRunsAnImageFromARegistry(t *testing.T) {
	ctx := t.Context()
	c := getCluster(t)
	ensureNamespace(ctx, t, c, imagesNamespace)
	ref := pushTestImage(t, c, "nodeagent/testserver")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "from-registry", Labels: map[string]string{"test": "image"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name: "server", Image: ref,
				Env: []corev1.EnvVar{{Name: "OVERRIDDEN", Value: "pod"}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
					PeriodSeconds: 1,
				},
				SecurityContext: &corev1.SecurityContext{ReadOnlyRootFilesystem: ptr.To(true)},
				VolumeMounts:    []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}},
			}},
			Volumes: []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	if _, err := c.client.CoreV1().Pods(imagesNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.client.CoreV1().Pods(imagesNamespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	var ip string
	poll(t, "the pod from the registry Ready", 60*time.Second, func() (bool, error) {
		p, err := c.client.CoreV1().Pods(imagesNamespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if !podCondition(p, corev1.PodReady) {
			return false, fmt.Errorf("phase %s, containers %+v", p.Status.Phase, p.Status.ContainerStatuses)
		}
		ip = p.Status.PodIP
		wantID := registryName + "/nodeagent/testserver@" + strings.SplitN(ref, "@", 2)[1]
		if got := p.Status.ContainerStatuses[0].ImageID; got != wantID {
			t.Errorf("imageID %q, want %q (the index digest the reference pins)", got, wantID)
		}
		return true, nil
	})
	for _, tc := range []struct{ path, want string }{
		{"/env?name=FROM_IMAGE", "image"},
		{"/env?name=OVERRIDDEN", "pod"},
		{"/env?name=PATH", "/usr/bin"},
		{"/file?path=fresh", "from the second layer"}, // relative to the working directory /srv
	} {
		if got := get(t, ip, tc.path); got != tc.want {
			t.Errorf("GET %s = %q, want %q", tc.path, got, tc.want)
		}
	}
	if code := status(t, ip, "/file?path=/srv/stale"); code != http.StatusNotFound {
		t.Errorf("the file the second layer whites out: GET answered %d, want 404", code)
	}
	if hosts := get(t, ip, "/file?path=/etc/hosts"); !strings.Contains(hosts, ip) || strings.Contains(hosts, "the image's own") {
		t.Errorf("/etc/hosts in the container is %q, want the pod's (naming %s)", hosts, ip)
	}
	// readOnlyRootFilesystem: the root refuses writes, the emptyDir on it takes them.
	if code := status(t, ip, "/write?path=/srv/new"); code != http.StatusInternalServerError {
		t.Errorf("a write to the read-only root answered %d, want 500 (refused)", code)
	}
	get(t, ip, "/write?path=/scratch/new")
	// The image's user, where the node's user namespace maps it (a cluster started by root);
	// the namespace's root otherwise.
	wantID := fmt.Sprintf("%d:%d", imageUser, imageUser)
	if !userns.Mapped(imageUser, imageUser) {
		wantID = "0:0"
		t.Logf("this user namespace maps no uid %d: the container runs as its root", imageUser)
	}
	if got := get(t, ip, "/id"); got != wantID {
		t.Errorf("the container runs as %s, want %s", got, wantID)
	}
	if got := get(t, ip, "/file?path=/home/app/note"); got != "only the image's user reads this" {
		t.Errorf("the image user's own file (mode 0600) reads %q", got)
	}
}

// Tests the securityContext the agent applies: a non-root container binds a port below 1024
// only with the pod's net.ipv4.ip_unprivileged_port_start sysctl; runAsNonRoot refuses root; a
// sysctl that is not a safe one of the network namespace is refused.
func TestAgentAppliesTheSecurityContext(t *testing.T) {
	ctx := t.Context()
	c := getCluster(t)
	ensureNamespace(ctx, t, c, imagesNamespace)
	ref := pushTestImage(t, c, "nodeagent/testserver")
	lowPort := func(name string, sysctls ...corev1.Sysctl) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: ptr.To[int64](1),
				SecurityContext:               &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), Sysctls: sysctls},
				Containers: []corev1.Container{{
					Name: "server", Image: ref, Args: []string{"-listen=:80"},
					ReadinessProbe: &corev1.Probe{
						ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(80)}},
						PeriodSeconds: 1,
					},
				}},
			},
		}
	}
	create := func(pod *corev1.Pod) {
		t.Helper()
		if _, err := c.client.CoreV1().Pods(imagesNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.client.CoreV1().Pods(imagesNamespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		})
	}

	if userns.Mapped(imageUser, imageUser) {
		create(lowPort("low-port-allowed", corev1.Sysctl{Name: "net.ipv4.ip_unprivileged_port_start", Value: "80"}))
		create(lowPort("low-port-refused"))
		poll(t, "the non-root pod with the sysctl Ready on port 80", 60*time.Second, func() (bool, error) {
			p, err := c.client.CoreV1().Pods(imagesNamespace).Get(ctx, "low-port-allowed", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return podCondition(p, corev1.PodReady), fmt.Errorf("containers %+v", p.Status.ContainerStatuses)
		})
		poll(t, "the non-root pod without the sysctl failing to bind port 80", 60*time.Second, func() (bool, error) {
			p, err := c.client.CoreV1().Pods(imagesNamespace).Get(ctx, "low-port-refused", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if podCondition(p, corev1.PodReady) {
				t.Fatal("a non-root container bound port 80 without the sysctl")
			}
			for _, cs := range p.Status.ContainerStatuses {
				if term := cmp.Or(cs.State.Terminated, cs.LastTerminationState.Terminated); term != nil && term.ExitCode != 0 {
					return true, nil
				}
			}
			return false, fmt.Errorf("containers %+v", p.Status.ContainerStatuses)
		})
	} else {
		t.Logf("this user namespace maps no uid %d: the low-port cases need a cluster started by root", imageUser)
	}

	root := lowPort("non-root-as-root")
	root.Spec.SecurityContext.RunAsUser = ptr.To[int64](0)
	create(root)
	waitWaiting(t, c, root.Name, "CreateContainerConfigError", "breaks non-root policy")

	unsafe := lowPort("unsafe-sysctl", corev1.Sysctl{Name: "kernel.msgmax", Value: "65536"})
	create(unsafe)
	waitWaiting(t, c, unsafe.Name, "SysctlForbidden", "kernel.msgmax")
}

// waitWaiting waits for the pod's container to wait with reason and a message holding message.
func waitWaiting(t *testing.T, c *cluster, pod, reason, message string) {
	t.Helper()
	poll(t, pod+" waiting with "+reason, 30*time.Second, func() (bool, error) {
		p, err := c.client.CoreV1().Pods(imagesNamespace).Get(t.Context(), pod, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && w.Reason == reason && strings.Contains(w.Message, message) {
				return true, nil
			}
		}
		return false, fmt.Errorf("containers %+v", p.Status.ContainerStatuses)
	})
}

// Tests that an image the registry does not hold, and one of a registry the agent does not pull
// from, leave the container waiting with ErrImagePull and a message naming the image.
func TestAgentReportsImagesItCannotPull(t *testing.T) {
	ctx := t.Context()
	c := getCluster(t)
	ensureNamespace(ctx, t, c, imagesNamespace)
	for _, tc := range []struct{ pod, image, message string }{
		{"missing-image", registryName + "/nodeagent/missing:v1", "not in the registry"},
		{"unknown-registry", "elsewhere.test/nodeagent/testserver:v1", "no registry the node pulls from serves it"},
	} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: tc.pod},
			Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers:                    []corev1.Container{{Name: "server", Image: tc.image}},
			},
		}
		if _, err := c.client.CoreV1().Pods(imagesNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.client.CoreV1().Pods(imagesNamespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		})
		waitWaiting(t, c, tc.pod, "ErrImagePull", tc.image)
		waitWaiting(t, c, tc.pod, "ErrImagePull", tc.message)
	}
}

// status fetches path from the test server on ip and returns the status code.
func status(t *testing.T, ip, path string) int {
	t.Helper()
	code, _ := getPod(t, ip, path)
	return code
}
