// Command cluster runs a whole local cluster in namespaces it creates: etcd, kube-apiserver,
// kube-controller-manager and the node agent, with Coxswain deployed from config/default as
// `make deploy` would, then runs a command inside or waits for Ctrl-C. hack/cluster.sh builds
// the binaries and calls it; see docs/local-cluster.md ("Run the cluster").
//
// Outside, it renders the manifests (a copy of config/ with the images set), writes the agent's
// image map and re-executes itself in new user, network, PID and mount namespaces (the user
// namespace maps ids 0 to 65535 when root starts it, only its root otherwise), recording the
// inner process in <state>/cluster.pid for `hack/cluster.sh exec`. Inside, it
// refuses a network namespace with anything but a loopback or with a route out, starts the
// servers and the agent, applies the manifests and waits until Coxswain is ready. The PID
// namespace takes every process with it when the tree ends.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Addresses of the contract between the cluster's parts (docs/local-cluster.md).
const (
	// nodeAddress is the bridge's address: the node's InternalIP, the API server's advertised
	// address, the cluster DNS server and the kubelet API.
	nodeAddress = "10.244.0.1"
	apiPort     = 6443
	nodeName    = "local-node"

	envInner = "COXSWAIN_CLUSTER_INNER"
	// envStart carries the time the whole run started (Unix seconds, fractional), so progress
	// lines count from the user's command, builds included.
	envStart = "COXSWAIN_CLUSTER_START"
)

type options struct {
	state, assets, agent, coredns, kustomize, config, overlay string
	operatorImage, proxyImage                                 string
	operatorBinary, proxyBinary                               string
	release                                                   string
	nextRelease, nextConfig                                   string
	helm, chart, nextChart                                    string
	images                                                    stringList
	extraImages                                               stringList
	wait                                                      string
	timeout                                                   time.Duration
	cmd                                                       []string
}

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	if len(os.Args) < 2 || os.Args[1] != "run" {
		fmt.Fprintln(os.Stderr, "usage: cluster run [flags] [--] [CMD ARG...]")
		os.Exit(2)
	}
	var o options
	fs := flag.NewFlagSet("cluster run", flag.ExitOnError)
	fs.StringVar(&o.state, "state", "bin/cluster", "state directory: admin.kubeconfig, cluster.pid, images.txt, logs/")
	fs.StringVar(&o.assets, "assets", "bin/k8s", "directory of etcd, kube-apiserver, kube-controller-manager and kubectl")
	fs.StringVar(&o.agent, "agent", "", "node agent binary (required)")
	fs.StringVar(&o.coredns, "coredns", "bin/coredns", "CoreDNS binary the node agent runs as the cluster DNS (hack/coredns-assets.sh)")
	fs.StringVar(&o.kustomize, "kustomize", "", "kustomize binary (required)")
	fs.StringVar(&o.config, "config", "config", "the kustomize tree to deploy from (not modified)")
	fs.StringVar(&o.overlay, "overlay", "", "deploy config/overlays/<name> instead of config/default")
	fs.StringVar(&o.operatorImage, "operator-image", "coxswain.dev/coxswain:dev", "operator image, set as make deploy's IMG")
	fs.StringVar(&o.proxyImage, "proxy-image", "coxswain.dev/coxswain-proxy:dev", "proxy image, set as make deploy's PROXY_IMG")
	fs.StringVar(&o.operatorBinary, "operator-binary", "bin/coxswain", "static binary the operator image maps to")
	fs.StringVar(&o.proxyBinary, "proxy-binary", "bin/coxswain-proxy", "static binary the proxy image maps to")
	fs.StringVar(&o.release, "release", "", "directory `release images` wrote (images.json, OCI layouts): the operator and proxy run from its images, pulled by the node from a registry inside the cluster, instead of the binaries of --operator-binary and --proxy-binary")
	fs.StringVar(&o.nextRelease, "next-release", "", "directory of `release images` of the release to upgrade to: its images are served too, and the manifests of --next-config pinned to them are given to the command (COXSWAIN_UPGRADE_MANIFEST) with both releases' images (docs/local-cluster.md)")
	fs.StringVar(&o.nextConfig, "next-config", "", "the kustomize tree of the release to upgrade to (with --next-release)")
	fs.StringVar(&o.helm, "helm", "", "helm binary: with --chart, Coxswain is installed with helm install instead of kubectl apply")
	fs.StringVar(&o.chart, "chart", "", "chart directory to helm install, its images set to those of --release (with --helm)")
	fs.StringVar(&o.nextChart, "next-chart", "", "chart directory of the release to upgrade to, given to the command (COXSWAIN_UPGRADE_CHART, with --chart)")
	fs.Var(&o.extraImages, "image", "IMAGE=PATH added to the image map (repeatable)")
	fs.Var(&o.images, "images", "image map file whose `IMAGE PATH` lines are added, paths relative to its directory (repeatable)")
	fs.StringVar(&o.wait, "wait", "pool", "wait before the command until the operator is Available (operator), also the shared proxy pool is Ready (pool), or not at all (none)")
	fs.DurationVar(&o.timeout, "timeout", 3*time.Minute, "how long each wait may take")
	_ = fs.Parse(os.Args[2:])
	o.cmd = fs.Args()
	if (o.nextRelease == "") != (o.nextConfig == "") || (o.nextRelease != "" && o.release == "") {
		fmt.Fprintln(os.Stderr, "cluster: --next-release and --next-config go together, with --release")
		os.Exit(2)
	}
	if o.chart != "" && (o.helm == "" || o.release == "" || o.overlay != "") {
		fmt.Fprintln(os.Stderr, "cluster: --chart needs --helm and --release, and takes no --overlay")
		os.Exit(2)
	}
	if o.wait != "none" && o.wait != "operator" && o.wait != "pool" {
		fmt.Fprintf(os.Stderr, "cluster: --wait must be none, operator or pool, not %q\n", o.wait)
		os.Exit(2)
	}
	var code int
	var err error
	if os.Getenv(envInner) == "1" {
		code, err = inner(o)
	} else {
		code, err = outer(o)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "cluster: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// progress prints a line prefixed with the seconds since the run started.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "cluster: [%6.1fs] %s\n", time.Since(startTime()).Seconds(), fmt.Sprintf(format, args...))
}

var start = time.Now()

func startTime() time.Time {
	if s, err := strconv.ParseFloat(os.Getenv(envStart), 64); err == nil && s > 0 {
		return time.Unix(0, int64(s*1e9))
	}
	return start
}
