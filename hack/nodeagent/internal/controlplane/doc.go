// Package controlplane starts a real etcd, kube-apiserver and kube-controller-manager (the
// binaries hack/k8s-assets.sh builds) with the certificates and ServiceAccount signing key
// they need, for the node agent's tests and, later, a local cluster command. It runs them in
// whatever namespaces the caller is in; the caller picks the address the API server
// advertises.
package controlplane
