// Package testenv starts a real kube-apiserver and etcd (the binaries hack/k8s-assets.sh builds)
// with Coxswain's CRDs and the pinned Gateway API CRDs installed, for tests and for the local
// control plane of `make run`.
package testenv
