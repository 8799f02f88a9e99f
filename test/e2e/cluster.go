package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/testenv"
)

// advertiseAddress is the API server's advertised address, on the namespace's loopback.
const advertiseAddress = "198.18.0.1"

// Cluster is a real kube-apiserver and etcd with Coxswain's and the Gateway API's CRDs.
type Cluster struct {
	env    *envtest.Environment
	config *rest.Config
	// Client is an administrator's client with the Kubernetes, Gateway API and Coxswain types.
	Client client.Client
	// Kubeconfig is the path of a kubeconfig file for the operator process.
	Kubeconfig string
}

// StartCluster starts the control plane and writes a kubeconfig into dir.
func StartCluster(dir string) (*Cluster, error) {
	env, err := testenv.New()
	if err != nil {
		return nil, fmt.Errorf("start cluster: %w", err)
	}
	// Without a default route the API server finds no address to advertise by itself; the
	// namespace's test range is one the Endpoints of the kubernetes Service accept.
	env.ControlPlane.GetAPIServer().Configure().Set("advertise-address", advertiseAddress)
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("start cluster: %w", err)
	}
	c := &Cluster{env: env, config: cfg}
	if err := c.init(cfg, dir); err != nil {
		return nil, errors.Join(err, env.Stop())
	}
	return c, nil
}

func (c *Cluster) init(cfg *rest.Config, dir string) error {
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), v1alpha1.AddToScheme(scheme), gwapiv1.Install(scheme)); err != nil {
		return fmt.Errorf("build scheme: %w", err)
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("create client: %w", err)
	}
	c.Client = cl
	// The operator runs as an administrator: the suite tests the control channel and the
	// data plane, not the RBAC manifests.
	user, err := c.env.AddUser(envtest.User{Name: "coxswain-e2e-operator", Groups: []string{"system:masters"}}, cfg)
	if err != nil {
		return fmt.Errorf("add operator user: %w", err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return fmt.Errorf("write operator kubeconfig: %w", err)
	}
	c.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(c.Kubeconfig, kubeconfig, 0o600); err != nil {
		return fmt.Errorf("write operator kubeconfig: %w", err)
	}
	return nil
}

// Stop stops the control plane.
func (c *Cluster) Stop() error {
	if err := c.env.Stop(); err != nil {
		return fmt.Errorf("stop cluster: %w", err)
	}
	return nil
}

// EnsureNamespace creates namespace name unless it exists.
func (c *Cluster) EnsureNamespace(ctx context.Context, name string) error {
	return c.ensure(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
}

// ServiceAccountToken creates ServiceAccount namespace/name unless it exists and returns a
// token for it with the discovery audience, as the kubelet would project it: bound to a pod of
// that ServiceAccount on a node (a pod object no kubelet runs; the proxy runs as a process).
func (c *Cluster) ServiceAccountToken(ctx context.Context, namespace, name string) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := c.ensure(ctx, sa); err != nil {
		return "", err
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name + "-e2e"},
		Spec: corev1.PodSpec{
			ServiceAccountName: name, NodeName: "e2e-node", AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "proxy", Image: "coxswain.dev/coxswain-proxy:e2e"}},
		},
	}
	if err := c.ensure(ctx, pod); err != nil {
		return "", err
	}
	if err := c.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
		return "", fmt.Errorf("read pod %s/%s: %w", namespace, pod.Name, err)
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:         []string{wellknown.TokenAudience},
		ExpirationSeconds: ptr.To[int64](3600),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if err := c.Client.SubResource("token").Create(ctx, sa, req); err != nil {
		return "", fmt.Errorf("request token for %s/%s: %w", namespace, name, err)
	}
	return req.Status.Token, nil
}

// TrustBundle returns the PEM roots the operator published in its namespace.
func (c *Cluster) TrustBundle(ctx context.Context, namespace string) ([]byte, error) {
	var cm corev1.ConfigMap
	key := types.NamespacedName{Namespace: namespace, Name: wellknown.TrustBundleConfigMapName}
	if err := c.Client.Get(ctx, key, &cm); err != nil {
		return nil, fmt.Errorf("get trust bundle: %w", err)
	}
	pem := cm.Data[wellknown.TrustBundleKey]
	if pem == "" {
		return nil, fmt.Errorf("trust bundle %s has no %s", key, wellknown.TrustBundleKey)
	}
	return []byte(pem), nil
}

// ApplyManifests creates every object of the YAML files matching pattern, or updates it when
// it exists.
func (c *Cluster) ApplyManifests(ctx context.Context, pattern string) error {
	files, err := filepath.Glob(pattern)
	if err != nil {
		return fmt.Errorf("apply %s: %w", pattern, err)
	}
	if len(files) == 0 {
		return fmt.Errorf("apply %s: no files", pattern)
	}
	for _, file := range files {
		if err := c.applyFile(ctx, file); err != nil {
			return fmt.Errorf("apply %s: %w", file, err)
		}
	}
	return nil
}

func (c *Cluster) applyFile(ctx context.Context, path string) error {
	data, err := os.ReadFile(path) //nolint:gosec // a manifest of the project
	if err != nil {
		return err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if len(obj.Object) == 0 || obj.GetKind() == "Kustomization" {
			continue
		}
		err := c.Client.Create(ctx, obj)
		if apierrors.IsAlreadyExists(err) {
			existing := &unstructured.Unstructured{}
			existing.SetGroupVersionKind(obj.GroupVersionKind())
			if err := c.Client.Get(ctx, client.ObjectKeyFromObject(obj), existing); err != nil {
				return err
			}
			obj.SetResourceVersion(existing.GetResourceVersion())
			err = c.Client.Update(ctx, obj)
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", obj.GetKind(), client.ObjectKeyFromObject(obj), err)
		}
	}
}

// WriteServiceAccountKubeconfig writes a kubeconfig to path that authenticates as
// ServiceAccount namespace/name with a token for the API server, as a pod of that
// ServiceAccount would.
func (c *Cluster) WriteServiceAccountKubeconfig(ctx context.Context, namespace, name, path string) error {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := c.ensure(ctx, sa); err != nil {
		return err
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if err := c.Client.SubResource("token").Create(ctx, sa, req); err != nil {
		return fmt.Errorf("request token for %s/%s: %w", namespace, name, err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["e2e"] = &clientcmdapi.Cluster{Server: c.config.Host, CertificateAuthorityData: c.config.CAData}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: req.Status.Token}
	kc.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: name}
	kc.CurrentContext = "e2e"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("write kubeconfig of %s/%s: %w", namespace, name, err)
	}
	return nil
}

// ensure creates obj unless it exists.
func (c *Cluster) ensure(ctx context.Context, obj client.Object) error {
	if err := c.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
	}
	return nil
}
