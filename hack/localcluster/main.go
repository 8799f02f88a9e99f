// Command localcluster runs a command (the operator, from `make run`) against a Kubernetes API.
// When a cluster is configured (KUBECONFIG, ~/.kube/config, or in-cluster) it runs the command
// as it is. Otherwise it starts a local control plane (real etcd and kube-apiserver from
// bin/k8s), installs the CRDs, the install namespace and the sample CoxswainConfig, writes a
// kubeconfig to bin/local/kubeconfig, runs the command with KUBECONFIG pointing at it, and tears
// the control plane down when the command ends or on Ctrl-C.
//
//	go run ./hack/localcluster -- go run .
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/testenv"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: localcluster -- COMMAND [ARG...]")
		os.Exit(2)
	}
	code, err := run(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "localcluster: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func clusterConfigured() bool {
	if os.Getenv("KUBECONFIG") != "" || os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		return true
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return false
	}
	_, err = os.Stat(filepath.Join(home, ".kube", "config"))
	return err == nil
}

func run(args []string) (int, error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if clusterConfigured() {
		fmt.Fprintln(os.Stderr, "localcluster: using the configured cluster")
		return runCommand(ctx, args, os.Environ())
	}
	env, err := testenv.New()
	if err != nil {
		return 1, err
	}
	fmt.Fprintln(os.Stderr, "localcluster: no cluster configured, starting a local control plane (etcd + kube-apiserver)")
	cfg, err := env.Start()
	if err != nil {
		return 1, fmt.Errorf("start control plane: %w", err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "localcluster: stop control plane: %v\n", err)
		}
	}()
	root, err := testenv.ProjectRoot()
	if err != nil {
		return 1, err
	}
	kubeconfig := filepath.Join(root, "bin", "local", "kubeconfig")
	if err := writeKubeconfig(cfg, kubeconfig); err != nil {
		return 1, err
	}
	if err := seed(ctx, cfg, filepath.Join(root, "config", "samples")); err != nil {
		return 1, err
	}
	fmt.Fprintf(os.Stderr, "localcluster: control plane at %s\n  export KUBECONFIG=%s\n  bin/k8s/kubectl get coxswainconfigs -A\n", cfg.Host, kubeconfig)
	return runCommand(ctx, args, append(os.Environ(), "KUBECONFIG="+kubeconfig))
}

func runCommand(ctx context.Context, args, env []string) (int, error) {
	// Not CommandContext: on cancellation the whole process group gets SIGTERM, not SIGKILL.
	cmd := exec.Command(args[0], args[1:]...) //nolint:gosec,noctx // runs the command its user asked for
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = env, os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return 1, fmt.Errorf("start %s: %w", args[0], err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return exitCode(err)
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		return exitCode(<-done)
	}
}

func exitCode(err error) (int, error) {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), nil
	}
	return 0, err
}

func writeKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "admin"}
	kc.CurrentContext = "local"
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// seed creates the install namespace and every object of the samples directory.
func seed(ctx context.Context, cfg *rest.Config, samples string) error {
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: wellknown.InstallNamespace}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("seed namespace: %w", err)
	}
	files, err := filepath.Glob(filepath.Join(samples, "*.yaml"))
	if err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	for _, f := range files {
		if err := applyFile(ctx, c, f); err != nil {
			return fmt.Errorf("seed %s: %w", filepath.Base(f), err)
		}
	}
	return nil
}

func applyFile(ctx context.Context, c client.Client, path string) error {
	data, err := os.ReadFile(path) //nolint:gosec // a file of the project's samples directory
	if err != nil {
		return err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if len(obj.Object) == 0 {
			continue
		}
		if err := c.Create(ctx, &obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
}
