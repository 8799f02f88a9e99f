// Command coredns is CoreDNS with only the plugins the local cluster's DNS needs: bind (listen
// on the node's bridge address), errors, kubernetes (Services and EndpointSlices from the API
// server) and ready. There is no forward plugin: the cluster has no upstream resolver, so names
// outside the cluster domain are refused. hack/coredns-assets.sh builds it; the node agent runs
// it (--dns-server). It is a module of its own so its dependencies never reach the product's.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() { coremain.Run() }
