package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Options say where the binaries are and how the API server is reached.
type Options struct {
	// Assets holds etcd, kube-apiserver and kube-controller-manager.
	Assets string
	// Dir receives data, certificates and kubeconfigs; the caller removes it.
	Dir string
	// AdvertiseAddress is the API server's advertised address: without a default route it
	// finds none by itself. It is also a SAN of the serving certificate.
	AdvertiseAddress string
	// BindAddress is where the API server listens; 127.0.0.1 when empty.
	BindAddress string
	// SecurePort is the API server's port; a free port when zero.
	SecurePort int
	// Output receives the servers' logs; nil discards them.
	Output io.Writer
	// LogDir, when set, receives each server's log in <name>.log instead of Output.
	LogDir string
}

// controllers are what a cluster of Deployments on a process-based node needs; EndpointSlices
// feed the service proxy and the cluster DNS.
var controllers = []string{
	"deployment-controller", "replicaset-controller", "garbage-collector-controller",
	"serviceaccount-controller", "root-ca-certificate-publisher-controller", "namespace-controller",
	"endpointslice-controller",
}

// ControlPlane is a running etcd, kube-apiserver and kube-controller-manager.
type ControlPlane struct {
	// Config is an administrator's (system:masters) client configuration.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file with the administrator's credentials.
	Kubeconfig string
	// CAFile is the cluster CA's certificate. The node agent's kubelet API trusts the client
	// certificates it signs (--kubelet-client-ca).
	CAFile string
	ca     *authority
	procs  []*process
}

// ClientCertificate signs a client certificate of the cluster CA for user in groups and
// returns it and its key, PEM encoded.
func (cp *ControlPlane) ClientCertificate(user string, groups ...string) (certPEM, keyPEM []byte, err error) {
	return cp.ca.issue(user, groups, nil)
}

// Start starts the three servers and waits until the API server is ready.
func Start(ctx context.Context, o Options) (*ControlPlane, error) {
	if o.BindAddress == "" {
		o.BindAddress = "127.0.0.1"
	}
	cp := &ControlPlane{}
	if err := cp.start(ctx, o); err != nil {
		return nil, errors.Join(err, cp.Stop())
	}
	return cp, nil
}

func (cp *ControlPlane) start(ctx context.Context, o Options) error {
	ca, err := newAuthority()
	if err != nil {
		return err
	}
	cp.ca = ca
	cp.CAFile = filepath.Join(o.Dir, "ca.crt")
	if err := os.WriteFile(cp.CAFile, ca.pem, 0o600); err != nil {
		return fmt.Errorf("write CA: %w", err)
	}
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	etcdURL := "http://127.0.0.1:" + ports[0]
	if err := cp.startEtcd(o, etcdURL, "http://127.0.0.1:"+ports[1]); err != nil {
		return err
	}
	if o.SecurePort != 0 {
		ports[2] = strconv.Itoa(o.SecurePort)
	}
	host := "https://127.0.0.1:" + ports[2]
	if err := cp.startAPIServer(o, ca, etcdURL, ports[2]); err != nil {
		return err
	}
	admin, err := cp.writeKubeconfig(ca, host, "coxswain-admin", filepath.Join(o.Dir, "admin.kubeconfig"))
	if err != nil {
		return err
	}
	cp.Kubeconfig = admin
	if cp.Config, err = clientcmd.BuildConfigFromFlags("", admin); err != nil {
		return fmt.Errorf("load admin kubeconfig: %w", err)
	}
	if err := cp.waitReady(ctx); err != nil {
		return err
	}
	kcm, err := cp.writeKubeconfig(ca, host, "kube-controller-manager", filepath.Join(o.Dir, "kcm.kubeconfig"))
	if err != nil {
		return err
	}
	return cp.run(o, "kube-controller-manager",
		"--kubeconfig="+kcm,
		"--controllers="+strings.Join(controllers, ","),
		"--root-ca-file="+cp.CAFile,
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=false",
	)
}

func (cp *ControlPlane) startEtcd(o Options, clientURL, peerURL string) error {
	return cp.run(o, "etcd",
		"--name=default",
		"--data-dir="+filepath.Join(o.Dir, "etcd"),
		"--listen-client-urls="+clientURL,
		"--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL,
		"--unsafe-no-fsync",
		"--log-level=warn",
	)
}

func (cp *ControlPlane) startAPIServer(o Options, ca *authority, etcdURL, port string) error {
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")}
	if ip := net.ParseIP(o.AdvertiseAddress); ip != nil {
		ips = append(ips, ip)
	}
	certPEM, keyPEM, err := ca.issue("kube-apiserver", nil, ips)
	if err != nil {
		return err
	}
	cert, key := filepath.Join(o.Dir, "apiserver.crt"), filepath.Join(o.Dir, "apiserver.key")
	if err := errors.Join(os.WriteFile(cert, certPEM, 0o600), os.WriteFile(key, keyPEM, 0o600)); err != nil {
		return fmt.Errorf("write serving certificate: %w", err)
	}
	// The identity the API server calls kubelets with (pods/log): system:masters passes the
	// node agent's SubjectAccessReview on nodes/proxy.
	kubeletCertPEM, kubeletKeyPEM, err := ca.issue("kube-apiserver-kubelet-client", []string{"system:masters"}, nil)
	if err != nil {
		return err
	}
	kubeletCert, kubeletKey := filepath.Join(o.Dir, "apiserver-kubelet-client.crt"), filepath.Join(o.Dir, "apiserver-kubelet-client.key")
	if err := errors.Join(os.WriteFile(kubeletCert, kubeletCertPEM, 0o600), os.WriteFile(kubeletKey, kubeletKeyPEM, 0o600)); err != nil {
		return fmt.Errorf("write kubelet client certificate: %w", err)
	}
	saKey, saPub, err := serviceAccountKeys(o.Dir)
	if err != nil {
		return err
	}
	const issuer = "https://kubernetes.default.svc.cluster.local"
	return cp.run(o, "kube-apiserver",
		"--etcd-servers="+etcdURL,
		"--bind-address="+o.BindAddress,
		"--secure-port="+port,
		"--advertise-address="+o.AdvertiseAddress,
		"--cert-dir="+filepath.Join(o.Dir, "apiserver"),
		"--tls-cert-file="+cert,
		"--tls-private-key-file="+key,
		"--client-ca-file="+cp.CAFile,
		"--service-account-issuer="+issuer,
		"--api-audiences="+issuer,
		"--service-account-key-file="+saPub,
		"--service-account-signing-key-file="+saKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--authorization-mode=RBAC",
		"--allow-privileged=true",
		"--kubelet-client-certificate="+kubeletCert,
		"--kubelet-client-key="+kubeletKey,
		"--kubelet-preferred-address-types=InternalIP",
	)
}

// writeKubeconfig writes a kubeconfig for a system:masters client certificate of user.
func (cp *ControlPlane) writeKubeconfig(ca *authority, host, user, path string) (string, error) {
	certPEM, keyPEM, err := ca.issue(user, []string{"system:masters"}, nil)
	if err != nil {
		return "", err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: ca.pem}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	kc.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: user}
	kc.CurrentContext = "local"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return "", fmt.Errorf("write kubeconfig: %w", err)
	}
	return path, nil
}

func (cp *ControlPlane) waitReady(ctx context.Context) error {
	client, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last error
	for {
		_, last = client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if last == nil {
			return nil
		}
		for _, p := range cp.procs {
			if p.exited() {
				return fmt.Errorf("%s exited while the API server started", p.name)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("API server not ready: %w", last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop stops the servers in reverse order of their start.
func (cp *ControlPlane) Stop() error {
	var errs []error
	for i := len(cp.procs) - 1; i >= 0; i-- {
		errs = append(errs, cp.procs[i].stop())
	}
	cp.procs = nil
	return errors.Join(errs...)
}

type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

func (cp *ControlPlane) run(o Options, name string, args ...string) error {
	cmd := exec.Command(filepath.Join(o.Assets, name), args...) //nolint:gosec,noctx // the pinned binaries of the assets directory; stopped by Stop
	cmd.Dir = o.Dir
	if o.Output != nil {
		cmd.Stdout, cmd.Stderr = o.Output, o.Output
	}
	var logFile *os.File
	if o.LogDir != "" {
		f, err := os.Create(filepath.Join(o.LogDir, name+".log")) //nolint:gosec // a log file in the caller's directory
		if err != nil {
			return fmt.Errorf("log of %s: %w", name, err)
		}
		logFile = f
		cmd.Stdout, cmd.Stderr = f, f
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		if logFile != nil {
			_ = logFile.Close()
		}
		return fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // it ends by stop's signal: its status says nothing
		if logFile != nil {
			_ = logFile.Close()
		}
		close(p.done)
	}()
	cp.procs = append(cp.procs, p)
	return nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s ignored SIGTERM for 10s and was killed", p.name)
	}
}

func freePorts(n int) ([]string, error) {
	var ports []string
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0") //nolint:noctx // a port probe
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
	return ports, nil
}
