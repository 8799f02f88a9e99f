package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ErrUnsupported reports a volume source the agent cannot serve.
var ErrUnsupported = errors.New("volume: unsupported volume source")

// defaultMode is the kubelet's default for Secret, ConfigMap, downward API and projected files.
const defaultMode = 0o644

// Set is the volumes of one pod. Its methods may be called concurrently (the pod's setup and
// its refresh loop); they take turns.
type Set struct {
	client kubernetes.Interface
	dir    string
	now    func() time.Time

	mu     sync.Mutex
	tokens map[string]token // by volume name and path
}

type token struct {
	value           string
	issued, expires time.Time
}

// New returns the volumes of a pod, kept under dir/<volume name>.
func New(client kubernetes.Interface, dir string) *Set {
	return &Set{client: client, dir: dir, now: time.Now, tokens: map[string]token{}}
}

// Path is the directory of volume name.
func (s *Set) Path(name string) string { return filepath.Join(s.dir, name) }

// Sync writes every volume of pod: the first time it creates them, later it refreshes what
// changed (Secret and ConfigMap content, labels and annotations, tokens nearing expiry). It
// returns an error naming the first volume it could not serve; the others are still written.
func (s *Set) Sync(ctx context.Context, pod *corev1.Pod) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if err := s.sync(ctx, pod, v); err != nil {
			errs = append(errs, fmt.Errorf("volume %s: %w", v.Name, err))
		}
	}
	return errors.Join(errs...)
}

func (s *Set) sync(ctx context.Context, pod *corev1.Pod, v *corev1.Volume) error {
	dir := s.Path(v.Name)
	switch {
	case v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory:
		return mountMemory(dir, v.EmptyDir.SizeLimit)
	case v.EmptyDir != nil:
		// World-writable, as the kubelet makes it, whatever the umask: a container running as
		// its image's user writes there.
		if err := os.MkdirAll(dir, 0o777); err != nil { //nolint:gosec // as above
			return err
		}
		return os.Chmod(dir, 0o777) //nolint:gosec // as above
	case v.Secret != nil:
		files, err := s.secretFiles(ctx, pod.Namespace, v.Secret.SecretName, v.Secret.Items, v.Secret.Optional, mode(v.Secret.DefaultMode))
		if err != nil {
			return err
		}
		return writeAtomic(dir, files)
	case v.ConfigMap != nil:
		files, err := s.configMapFiles(ctx, pod.Namespace, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional, mode(v.ConfigMap.DefaultMode))
		if err != nil {
			return err
		}
		return writeAtomic(dir, files)
	case v.DownwardAPI != nil:
		files, err := downwardFiles(pod, v.DownwardAPI.Items, mode(v.DownwardAPI.DefaultMode))
		if err != nil {
			return err
		}
		return writeAtomic(dir, files)
	case v.Projected != nil:
		files, err := s.projectedFiles(ctx, pod, v.Name, v.Projected)
		if err != nil {
			return err
		}
		return writeAtomic(dir, files)
	}
	return fmt.Errorf("%w (only emptyDir, secret, configMap, downwardAPI and projected)", ErrUnsupported)
}

func mode(m *int32) os.FileMode {
	if m == nil {
		return defaultMode
	}
	return os.FileMode(*m) //nolint:gosec // a file mode from the pod spec, validated by the API server
}

func itemMode(m *int32, def os.FileMode) os.FileMode {
	if m == nil {
		return def
	}
	return mode(m)
}

// keyFiles picks the files of a Secret's or ConfigMap's data: every key, or only items.
func keyFiles(data map[string][]byte, items []corev1.KeyToPath, def os.FileMode, what string) (map[string]file, error) {
	files := map[string]file{}
	if len(items) == 0 {
		for k, v := range data {
			files[k] = file{data: v, mode: def}
		}
		return files, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			return nil, fmt.Errorf("%s has no key %s", what, it.Key)
		}
		files[it.Path] = file{data: v, mode: itemMode(it.Mode, def)}
	}
	return files, nil
}

func (s *Set) secretFiles(ctx context.Context, ns, name string, items []corev1.KeyToPath, optional *bool, def os.FileMode) (map[string]file, error) {
	sec, err := s.client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && optional != nil && *optional {
		return map[string]file{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get secret %s: %w", name, err)
	}
	data := map[string][]byte{}
	for k, v := range sec.Data {
		data[k] = v
	}
	return keyFiles(data, items, def, "secret "+name)
}

func (s *Set) configMapFiles(ctx context.Context, ns, name string, items []corev1.KeyToPath, optional *bool, def os.FileMode) (map[string]file, error) {
	cm, err := s.client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && optional != nil && *optional {
		return map[string]file{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get configmap %s: %w", name, err)
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return keyFiles(data, items, def, "configmap "+name)
}

func downwardFiles(pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile, def os.FileMode) (map[string]file, error) {
	files := map[string]file{}
	for _, it := range items {
		if it.FieldRef == nil {
			return nil, fmt.Errorf("%w: downward API item %s has no fieldRef (resourceFieldRef is not served)", ErrUnsupported, it.Path)
		}
		v, err := FieldRef(pod, it.FieldRef.FieldPath)
		if err != nil {
			return nil, err
		}
		files[it.Path] = file{data: []byte(v), mode: itemMode(it.Mode, def)}
	}
	return files, nil
}

func (s *Set) projectedFiles(ctx context.Context, pod *corev1.Pod, volume string, p *corev1.ProjectedVolumeSource) (map[string]file, error) {
	def := mode(p.DefaultMode)
	files := map[string]file{}
	for _, src := range p.Sources {
		var part map[string]file
		var err error
		switch {
		case src.Secret != nil:
			part, err = s.secretFiles(ctx, pod.Namespace, src.Secret.Name, src.Secret.Items, src.Secret.Optional, def)
		case src.ConfigMap != nil:
			part, err = s.configMapFiles(ctx, pod.Namespace, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional, def)
		case src.DownwardAPI != nil:
			part, err = downwardFiles(pod, src.DownwardAPI.Items, def)
		case src.ServiceAccountToken != nil:
			part, err = s.tokenFile(ctx, pod, volume, src.ServiceAccountToken, def)
		default:
			err = fmt.Errorf("%w: projected source (only secret, configMap, downwardAPI and serviceAccountToken)", ErrUnsupported)
		}
		if err != nil {
			return nil, err
		}
		for k, v := range part {
			files[k] = v
		}
	}
	return files, nil
}

// tokenFile requests a token of the pod's ServiceAccount bound to the pod, with the
// projection's audience and expiry, and reuses it until 80% of its lifetime has passed (the
// kubelet's rule), so the file is renewed well before it expires.
func (s *Set) tokenFile(ctx context.Context, pod *corev1.Pod, volume string, p *corev1.ServiceAccountTokenProjection, def os.FileMode) (map[string]file, error) {
	key := volume + "/" + p.Path
	now := s.now()
	if t, ok := s.tokens[key]; ok && now.Before(t.issued.Add(t.expires.Sub(t.issued)*8/10)) {
		return map[string]file{p.Path: {data: []byte(t.value), mode: def}}, nil
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: p.ExpirationSeconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID},
	}}
	if p.Audience != "" {
		req.Spec.Audiences = []string{p.Audience}
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	resp, err := s.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("request token of serviceaccount %s: %w", sa, err)
	}
	s.tokens[key] = token{value: resp.Status.Token, issued: now, expires: resp.Status.ExpirationTimestamp.Time}
	return map[string]file{p.Path: {data: []byte(resp.Status.Token), mode: def}}, nil
}

// NextTokenRefresh is when the first token of the set should be renewed; zero without tokens.
func (s *Set) NextTokenRefresh() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var next time.Time
	for _, t := range s.tokens {
		at := t.issued.Add(t.expires.Sub(t.issued) * 8 / 10)
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next
}
