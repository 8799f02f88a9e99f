package volume

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

func read(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path) //nolint:gosec // a test's own directory
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// Tests that a rewrite switches the whole content at once, drops names that went away and
// the old payload, and that an unchanged content is not rewritten.
func TestWriteAtomic(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "vol")
	if err := writeAtomic(dir, map[string]file{"a": {data: []byte("1"), mode: 0o644}, "sub/b": {data: []byte("2"), mode: 0o600}}); err != nil {
		t.Fatal(err)
	}
	if read(t, filepath.Join(dir, "a")) != "1" || read(t, filepath.Join(dir, "sub", "b")) != "2" {
		t.Fatal("first content not readable through the links")
	}
	first, _ := os.Readlink(filepath.Join(dir, dataLink))
	if err := writeAtomic(dir, map[string]file{"a": {data: []byte("1"), mode: 0o644}, "sub/b": {data: []byte("2"), mode: 0o600}}); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.Readlink(filepath.Join(dir, dataLink)); again != first {
		t.Errorf("unchanged content was rewritten: %s -> %s", first, again)
	}
	if err := writeAtomic(dir, map[string]file{"a": {data: []byte("3"), mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(dir, "a")); got != "3" {
		t.Errorf("a = %q after the rewrite, want 3", got)
	}
	if _, err := os.Lstat(filepath.Join(dir, "sub")); !os.IsNotExist(err) {
		t.Errorf("sub survived a rewrite without it: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, first)); !os.IsNotExist(err) {
		t.Errorf("the old payload %s survived: %v", first, err)
	}
}

// Tests that a projected token is requested for the pod's ServiceAccount, bound to the pod
// with the projection's audience and expiry, kept until 80% of its lifetime and renewed after.
func TestTokenRenewedBeforeExpiry(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := start
	client := fake.NewClientset()
	var requests []*authenticationv1.TokenRequest
	client.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		req := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		requests = append(requests, req)
		req.Status = authenticationv1.TokenRequestStatus{
			Token:               "token-" + string(rune('0'+len(requests))),
			ExpirationTimestamp: metav1.NewTime(clock.Add(time.Duration(*req.Spec.ExpirationSeconds) * time.Second)),
		}
		return true, req, nil
	})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-1"},
		Spec: corev1.PodSpec{ServiceAccountName: "web-sa", Volumes: []corev1.Volume{{
			Name: "tok", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
				ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "aud", ExpirationSeconds: ptr.To[int64](1000), Path: "token"},
			}}}},
		}}},
	}
	s := New(client, t.TempDir())
	s.now = func() time.Time { return clock }
	sync := func(want string) {
		t.Helper()
		if err := s.Sync(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
		if got := read(t, filepath.Join(s.Path("tok"), "token")); got != want {
			t.Errorf("at %s the token file holds %q, want %q", clock.Sub(start), got, want)
		}
	}
	sync("token-1")
	clock = start.Add(799 * time.Second)
	sync("token-1")
	clock = start.Add(801 * time.Second)
	sync("token-2")
	if len(requests) != 2 {
		t.Fatalf("%d token requests, want 2", len(requests))
	}
	spec := requests[0].Spec
	if ref := spec.BoundObjectRef; ref == nil || ref.Kind != "Pod" || ref.Name != "web" || ref.UID != "uid-1" {
		t.Errorf("token bound to %+v, want the pod", ref)
	}
	if len(spec.Audiences) != 1 || spec.Audiences[0] != "aud" || *spec.ExpirationSeconds != 1000 {
		t.Errorf("token request %+v, want audience aud for 1000s", spec)
	}
	if want := start.Add(801*time.Second + 800*time.Second); !s.NextTokenRefresh().Equal(want) {
		t.Errorf("next refresh %s, want %s", s.NextTokenRefresh(), want)
	}
}
