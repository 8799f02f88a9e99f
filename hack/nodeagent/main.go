// Command nodeagent is a node of a local Kubernetes cluster without a container runtime: it
// registers a Node, binds unscheduled pods to it and runs their containers as local processes,
// each pod in its own network namespace on a bridge, chrooted into a directory holding the
// binary its image stands for and its volumes. Run it inside a private user and network
// namespace (unshare --user --map-root-user --net --pid --fork); it refuses a network
// namespace with a route out. See docs/local-cluster.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"coxswain.dev/coxswain/hack/nodeagent/internal/dns"
	"coxswain.dev/coxswain/hack/nodeagent/internal/image"
	"coxswain.dev/coxswain/hack/nodeagent/internal/kubelet"
	"coxswain.dev/coxswain/hack/nodeagent/internal/node"
	"coxswain.dev/coxswain/hack/nodeagent/internal/pod"
	"coxswain.dev/coxswain/hack/nodeagent/internal/sandbox"
	"coxswain.dev/coxswain/hack/nodeagent/internal/service"
)

// version is reported as the Node's kubelet version.
const version = "v1.36.3-coxswain-node-agent"

type options struct {
	kubeconfig, nodeName, images, stateDir, podCIDR, bridge, apiServer string
	kubeletClientCA, dnsServer, clusterDomain                          string
	serviceCIDR, lbPool, lbClass                                       string
	restartBackoff, maxRestartBackoff, leaseDuration, volumeRefresh    time.Duration
	verbose                                                            bool
	registries                                                         mirrorList
}

// mirrorList is the repeatable --registry flag: NAME=HOST:PORT.
type mirrorList map[string]string

func (m *mirrorList) String() string { return fmt.Sprint(map[string]string(*m)) }

func (m *mirrorList) Set(v string) error {
	name, hostPort, ok := strings.Cut(v, "=")
	if !ok || name == "" || hostPort == "" {
		return fmt.Errorf("want NAME=HOST:PORT, got %q", v)
	}
	if _, _, err := net.SplitHostPort(hostPort); err != nil {
		return fmt.Errorf("%q: %w", v, err)
	}
	if *m == nil {
		*m = mirrorList{}
	}
	(*m)[name] = hostPort
	return nil
}

func main() {
	if sandbox.Main(os.Args) {
		return
	}
	var o options
	hostname, _ := os.Hostname()
	flag.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the API server (an identity that may bind pods and write Node and pod status)")
	flag.StringVar(&o.nodeName, "node-name", hostname, "name of the Node to register")
	flag.StringVar(&o.images, "images", "", "image map file: one `IMAGE PATH` pair a line (required; may be empty)")
	flag.Var(&o.registries, "registry", "NAME=HOST:PORT: pull the images named under registry NAME (coxswain.dev) from the registry at HOST:PORT, over plain HTTP, for the images the map does not name (repeatable)")
	flag.StringVar(&o.stateDir, "state-dir", filepath.Join(os.TempDir(), "coxswain-node-agent"), "directory for pod roots, volumes and logs")
	flag.StringVar(&o.podCIDR, "pod-cidr", "10.244.0.0/24", "IPv4 range of pod addresses; its first address goes on the bridge")
	flag.StringVar(&o.bridge, "bridge", "cxbr0", "name of the bridge to create")
	flag.StringVar(&o.apiServer, "pod-api-server", "", "host:port pods reach the API server on (KUBERNETES_SERVICE_HOST/PORT); empty means the kubernetes Service, the first address of --service-cidr, port 443")
	flag.StringVar(&o.serviceCIDR, "service-cidr", "10.96.0.0/16", "the API server's service range (--service-cluster-ip-range): ClusterIPs the agent serves")
	flag.StringVar(&o.lbPool, "lb-pool", "10.245.0.0/24", "range of the addresses given to LoadBalancer Services")
	flag.StringVar(&o.lbClass, "lb-class", "", "spec.loadBalancerClass served besides none (empty: only Services without a class)")
	flag.DurationVar(&o.restartBackoff, "restart-backoff", 10*time.Second, "first delay before a container restart")
	flag.DurationVar(&o.maxRestartBackoff, "max-restart-backoff", 5*time.Minute, "longest delay before a container restart")
	flag.DurationVar(&o.leaseDuration, "lease-duration", 40*time.Second, "node Lease duration; renewed every quarter of it")
	flag.DurationVar(&o.volumeRefresh, "volume-refresh", time.Minute, "how often Secret, ConfigMap and downward API volumes are rewritten")
	flag.StringVar(&o.kubeletClientCA, "kubelet-client-ca", "", "CA file of the client certificates the kubelet API (pods/log, on the bridge address port 10250) accepts; empty serves no kubelet API")
	flag.StringVar(&o.dnsServer, "dns-server", "", "CoreDNS binary (hack/coredns-assets.sh) to run as the cluster DNS on the bridge address, port 53; empty runs no cluster DNS")
	flag.StringVar(&o.clusterDomain, "cluster-domain", "cluster.local", "the cluster's DNS domain")
	flag.BoolVar(&o.verbose, "v", false, "log at V(1)")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "nodeagent: %v\n", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.images == "" {
		return errors.New("--images is required")
	}
	zc := zap.NewDevelopmentConfig()
	if !o.verbose {
		zc.Level = zap.NewAtomicLevelAt(zap.InfoLevel)
	}
	zl, err := zc.Build()
	if err != nil {
		return fmt.Errorf("logger: %w", err)
	}
	log := zapr.NewLogger(zl)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	images, err := image.Load(o.images)
	if err != nil {
		return err
	}
	var registry *image.Store
	if len(o.registries) > 0 {
		if registry, err = image.NewStore(filepath.Join(o.stateDir, "images"), o.registries); err != nil {
			return err
		}
	}
	prefix, err := netip.ParsePrefix(o.podCIDR)
	if err != nil {
		return fmt.Errorf("--pod-cidr: %w", err)
	}
	svcCfg, err := serviceConfig(o)
	if err != nil {
		return err
	}
	network, err := sandbox.SetUpNetwork(ctx, o.bridge, prefix, svcCfg.ServiceCIDR, svcCfg.LBPool)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own binary: %w", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.UserAgent = "coxswain-node-agent"
	// Status writes of pods and load balancers come in bursts (20 Gateways at once); the
	// client's default of 5 a second would queue them for seconds.
	cfg.QPS, cfg.Burst = 50, 100
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	heartbeat := node.New(client, node.Config{
		Name: o.nodeName, Address: network.Gateway().String(), PodCIDR: prefix.Masked().String(),
		Capacity: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("8"),
			corev1.ResourceMemory: resource.MustParse("16Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
		},
		Version: version, LeaseDuration: o.leaseDuration, KubeletPort: kubeletPort(o),
	}, log)
	if err := heartbeat.Register(ctx); err != nil {
		return err
	}
	go heartbeat.Run(ctx)
	services, err := service.New(client, svcCfg, log)
	if err != nil {
		return err
	}
	if o.apiServer == "" {
		o.apiServer = net.JoinHostPort(svcCfg.ServiceCIDR.Addr().Next().String(), "443")
	}
	pods := pod.New(client, pod.Config{
		Node: o.nodeName, StateDir: o.stateDir, Self: self, Images: images, Registry: registry, Network: network,
		RestartBackoff: o.restartBackoff, MaxRestartBackoff: o.maxRestartBackoff,
		APIServer: o.apiServer, VolumeRefresh: o.volumeRefresh,
		Nameserver: nameserver(o, network), ClusterDomain: o.clusterDomain,
	}, log)
	return serve(ctx, o, client, network.Gateway().String(), pods, services, log)
}

func kubeletPort(o options) int32 {
	if o.kubeletClientCA == "" {
		return 0
	}
	return kubelet.Port
}

func nameserver(o options, network *sandbox.Network) string {
	if o.dnsServer == "" {
		return ""
	}
	return network.Gateway().String()
}

// serve runs the pods, the service proxy and, when configured, the kubelet API and the cluster DNS until ctx
// ends; when one of them fails, the others stop and the agent exits.
func serve(ctx context.Context, o options, client kubernetes.Interface, address string, pods *pod.Controller, services *service.Controller, log logr.Logger) error {
	// The node is of no use without its services: when they fail, the agent stops.
	runs := []func(context.Context) error{pods.Run, services.Run}
	if o.kubeletClientCA != "" {
		api := kubelet.New(client, kubelet.Config{Address: address, Node: o.nodeName, ClientCA: o.kubeletClientCA, Logs: pods}, log)
		runs = append(runs, api.Run)
	}
	if o.dnsServer != "" {
		server := &dns.Server{
			Binary: o.dnsServer, Address: address, Domain: o.clusterDomain, Kubeconfig: o.kubeconfig,
			Dir: filepath.Join(o.stateDir, "coredns"), Output: os.Stderr, Log: log.WithName("dns"),
		}
		runs = append(runs, server.Run)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(runs))
	for _, run := range runs {
		go func() {
			err := run(ctx)
			cancel()
			errs <- err
		}()
	}
	var all []error
	for range runs {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

func serviceConfig(o options) (service.Config, error) {
	cidr, err := netip.ParsePrefix(o.serviceCIDR)
	if err != nil {
		return service.Config{}, fmt.Errorf("--service-cidr: %w", err)
	}
	pool, err := netip.ParsePrefix(o.lbPool)
	if err != nil {
		return service.Config{}, fmt.Errorf("--lb-pool: %w", err)
	}
	cfg := service.Config{ServiceCIDR: cidr.Masked(), LBPool: pool.Masked(), LBClass: o.lbClass}
	return cfg, cfg.Validate()
}
