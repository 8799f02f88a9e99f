// Package cluster is the end-to-end suite on the local cluster (hack/cluster.sh): the operator and
// its proxies run as pods deployed from config/default, dedicated proxies are provisioned by the
// operator, and requests go to the load-balancer addresses Gateways report. The tests talk to
// the cluster with the admin kubeconfig and dial pod and load-balancer addresses, so they run
// inside the cluster's namespaces only: `make test-e2e` compiles the test binary and runs it with
// `hack/cluster.sh run`, setting COXSWAIN_E2E_CLUSTER=1. Anywhere else every test skips itself.
package cluster
