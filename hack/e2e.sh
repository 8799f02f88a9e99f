#!/usr/bin/env bash
# Runs the end-to-end suite alone and verbosely: the operator and proxy binaries, built from
# this tree, against a real kube-apiserver and etcd, with HTTP traffic, inside private user,
# network and PID namespaces (see test/e2e/doc.go). `make test` runs it too, quietly.
#
#   hack/e2e.sh                                  # the whole suite
#   hack/e2e.sh -run 'EndToEnd/the_operator'     # arguments go to go test
#   COXSWAIN_E2E_PROXY=/path/to/proxy hack/e2e.sh   # test a prebuilt proxy (or _OPERATOR)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/go-toolchain.sh"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
KUBEBUILDER_ASSETS="${KUBEBUILDER_ASSETS:-$(hack/k8s-assets.sh)}"
export KUBEBUILDER_ASSETS
exec go test -count=1 -v ./test/e2e/ "$@"
