// Package e2e tests the real operator and proxy binaries together: a real kube-apiserver and
// etcd, the operator process issuing identities and compiling routes, proxy processes
// bootstrapping with ServiceAccount tokens, and HTTP traffic through the proxy to backends.
//
// TestMain compiles both binaries (or takes prebuilt ones from COXSWAIN_E2E_OPERATOR and
// COXSWAIN_E2E_PROXY), then re-executes the test binary under unshare in private user, network
// and PID namespaces. The network namespace's only interface is a loopback carrying
// 198.18.0.0/24, so backends get addresses the API server accepts in EndpointSlices and no
// packet can leave the machine; the PID namespace takes every process of the suite down with
// it. COXSWAIN_E2E=skip skips the suite where namespaces are unavailable; hack/e2e.sh runs it
// alone and verbosely.
package e2e
