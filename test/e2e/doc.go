// Package e2e tests the real operator and proxy binaries together: a real kube-apiserver and
// etcd, the operator process issuing identities and compiling routes, proxy processes
// bootstrapping with ServiceAccount tokens, and HTTP traffic through the proxy to backends.
// TestMain compiles both binaries, then re-executes the test binary in private user, network
// and PID namespaces whose only interface is a loopback carrying 198.18.0.0/24, so backends
// have addresses the API server accepts in EndpointSlices and no packet can leave the machine.
package e2e
