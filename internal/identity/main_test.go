package identity

import (
	"context"
	"os"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/testenv"
)

// The API server every test of the package shares.
var (
	scheme     *runtime.Scheme
	k8sClient  client.Client
	clientset  kubernetes.Interface
	restConfig *rest.Config
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, setup))
}

func setup(cfg *rest.Config) (err error) {
	restConfig = cfg
	scheme = runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if k8sClient, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	if clientset, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	return createNamespace(context.Background(), wellknown.InstallNamespace)
}

func createNamespace(ctx context.Context, name string) error {
	return k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
}

// newNamespace creates a namespace named after the test.
func newNamespace(t *testing.T, name string) string {
	t.Helper()
	if err := createNamespace(t.Context(), name); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	return name
}

func newServiceAccount(t *testing.T, namespace, name string) *corev1.ServiceAccount {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := k8sClient.Create(t.Context(), sa); err != nil {
		t.Fatalf("create ServiceAccount %s/%s: %v", namespace, name, err)
	}
	return sa
}

// newPod creates a pod that runs as serviceAccount on a node. No kubelet runs it: the API
// object, bound to a node as a scheduler would, is all a bound token needs.
func newPod(t *testing.T, namespace, name, serviceAccount string) *corev1.Pod {
	t.Helper()
	return newPodOn(t, namespace, name, serviceAccount, "node-a")
}

// newPodOn creates a pod that runs as serviceAccount, bound to node (none when empty).
func newPodOn(t *testing.T, namespace, name, serviceAccount, node string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.PodSpec{
			ServiceAccountName: serviceAccount,
			NodeName:           node,
			Containers:         []corev1.Container{{Name: "proxy", Image: "coxswain.dev/coxswain-proxy:test"}},
		},
	}
	if err := k8sClient.Create(t.Context(), pod); err != nil {
		t.Fatalf("create pod %s/%s: %v", namespace, name, err)
	}
	return pod
}

// deletePod removes pod at once; no kubelet would finish a graceful deletion.
func deletePod(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	if err := k8sClient.Delete(t.Context(), pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatalf("delete pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
}

// requestToken asks the API server for a token of namespace/serviceAccount for audiences (the API
// server's own when empty), bound to pod when it is not nil.
func requestToken(t *testing.T, namespace, serviceAccount string, audiences []string, pod *corev1.Pod) string {
	t.Helper()
	req := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences:         audiences,
		ExpirationSeconds: ptr.To[int64](3600),
	}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	resp, err := clientset.CoreV1().ServiceAccounts(namespace).CreateToken(t.Context(), serviceAccount, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("request token for %s/%s: %v", namespace, serviceAccount, err)
	}
	return resp.Status.Token
}

// eventually polls cond every 100ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond) // polling interval, not synchronisation
	}
}
