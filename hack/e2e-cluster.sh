#!/usr/bin/env bash
# Runs the end-to-end suite on the local cluster (test/e2e/cluster): the test binary is compiled
# here, where the Go module proxy is reachable, and run by hack/cluster.sh inside the cluster's
# namespaces, where nothing is. Four clusters, each started and torn down by hack/cluster.sh:
# config/default for TestCluster; config/overlays/external-ca, without its CA Secret, for
# TestExternalCA; and twice the release of hack/upgrade-from (hack/upgrade-from.sh builds it),
# installed with kubectl apply and then with helm, for TestUpgrade, which upgrades it to this
# tree under load the same way. `make test-e2e` and `make test` run it.
#
#   hack/e2e-cluster.sh                                   # every cluster
#   hack/e2e-cluster.sh --only default                    # only the config/default cluster
#   hack/e2e-cluster.sh --only external-ca                # only the external-ca cluster
#   hack/e2e-cluster.sh --only upgrade                    # only the kubectl apply upgrade
#   hack/e2e-cluster.sh --only upgrade-helm               # only the helm upgrade
#   hack/e2e-cluster.sh --only default -test.run 'TestCluster/.*outage'   # the rest goes to the test binary
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/go-toolchain.sh"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
only=""
if [[ "${1:-}" == "--only" ]]; then
	only="${2:?--only needs default, external-ca, upgrade or upgrade-helm}"
	shift 2
fi
case "${only}" in
"" | default | external-ca | upgrade | upgrade-helm) ;;
*)
	echo "hack/e2e-cluster.sh: --only takes default, external-ca, upgrade or upgrade-helm, not ${only}" >&2
	exit 2
	;;
esac

mkdir -p bin
go test -c -o bin/e2e-cluster.test ./test/e2e/cluster
# The suite refuses to run without it: a KUBECONFIG alone may name a real cluster.
export COXSWAIN_E2E_CLUSTER=1
test="${root}/bin/e2e-cluster.test"
start=$(date +%s)
status=0
if [[ -z "${only}" || "${only}" == default ]]; then
	hack/cluster.sh run -- "${test}" -test.v -test.timeout=20m -test.run '^TestCluster$' "$@" || status=1
fi
if [[ -z "${only}" || "${only}" == external-ca ]]; then
	# The operator cannot turn Ready there until the test creates the Secret: do not wait for it.
	hack/cluster.sh run --overlay external-ca --wait none -- "${test}" -test.v -test.timeout=10m -test.run '^TestExternalCA$' "$@" || status=1
fi
if [[ -z "${only}" || "${only}" == upgrade || "${only}" == upgrade-helm ]]; then
	from="$(hack/upgrade-from.sh)" || status=1
fi
if [[ -n "${from:-}" && (-z "${only}" || "${only}" == upgrade) ]]; then
	hack/cluster.sh run --from "${from}" -- "${test}" -test.v -test.timeout=10m -test.run '^TestUpgrade$' "$@" || status=1
fi
if [[ -n "${from:-}" && (-z "${only}" || "${only}" == upgrade-helm) ]]; then
	hack/cluster.sh run --from "${from}" --helm -- "${test}" -test.v -test.timeout=10m -test.run '^TestUpgrade$' "$@" || status=1
fi
echo "e2e-cluster: $([[ ${status} -eq 0 ]] && echo passed || echo FAILED) in $(($(date +%s) - start))s" >&2
exit "${status}"
