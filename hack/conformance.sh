#!/usr/bin/env bash
# Runs the Gateway API conformance suite (sigs.k8s.io/gateway-api/conformance, the version
# test/conformance/go.mod pins) with the GATEWAY-HTTP, GATEWAY-GRPC, GATEWAY-TLS, GATEWAY-TCP and
# GATEWAY-UDP profiles against Coxswain on the local cluster of hack/cluster.sh, one fresh cluster
# per mode, and writes the suite's report to bin/conformance/report-<mode>.yaml. See
# docs/conformance.md.
#
#   hack/conformance.sh                                   # every Gateway gets a dedicated proxy
#   CONFORMANCE_MODE=shared hack/conformance.sh           # every Gateway on the shared pool
#   CONFORMANCE_MODE=all hack/conformance.sh              # both, one after the other
#   CONFORMANCE_RUN_TEST=HTTPRouteSimpleSameNamespace hack/conformance.sh   # one test
#   GATEWAY_API_CHANNEL=experimental hack/conformance.sh  # with the experimental-channel CRDs
#   CONFORMANCE_HTTP1_ENGINE=native hack/conformance.sh   # every proxy on one HTTP/1.1 engine
#   CONFORMANCE_SKIP_TESTS=A,B  CONFORMANCE_ARGS='-debug'  CONFORMANCE_VERBOSE=1
#
# Exits non-zero when a test the suite ran failed (every test it runs is claimed: the core tests
# of the profile and the tests of the features the GatewayClass lists), or a mode gave no report.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/go-toolchain.sh"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
out="${root}/bin/conformance" # test/conformance/images.txt points here

case "${CONFORMANCE_MODE:-dedicated}" in
dedicated | shared) modes=("${CONFORMANCE_MODE:-dedicated}") ;;
all) modes=(dedicated shared) ;;
*)
	echo "conformance: CONFORMANCE_MODE must be dedicated, shared or all, not '${CONFORMANCE_MODE}'" >&2
	exit 2
	;;
esac
cluster_args=(--images test/conformance/images.txt)
case "${GATEWAY_API_CHANNEL:-standard}" in
standard) ;;
experimental) cluster_args+=(--overlay experimental) ;; # config/overlays/experimental
*)
	echo "conformance: GATEWAY_API_CHANNEL must be standard or experimental, not '${GATEWAY_API_CHANNEL}'" >&2
	exit 2
	;;
esac
if [[ ! -x hack/cluster.sh ]]; then
	echo "conformance: hack/cluster.sh is missing: the suite runs on its local cluster" >&2
	exit 1
fi

# Outside the cluster's namespaces (they have no network): the static programs the image map
# names, and the test binary, which runs inside them.
mkdir -p "${out}"
start=${SECONDS}
(
	cd test/conformance
	CGO_ENABLED=0 go build -o "${out}/echo-basic" sigs.k8s.io/gateway-api-conformance-images/echo-basic
	go test -c -o "${out}/conformance.test" .
)
echo "conformance: built echo-basic and the suite in $((SECONDS - start))s"

version="$(git describe --tags --always --dirty 2>/dev/null || echo dev)"
failed=0
summaries=()
for mode in "${modes[@]}"; do
	report="${out}/report-${mode}.yaml"
	log="${out}/${mode}.log"
	rm -f "${report}"
	args=(
		-test.run '^TestConformance$' -test.v -test.timeout "${CONFORMANCE_TIMEOUT:-60m}"
		-coxswain.mode="${mode}" -report-output="${report}" -version="${version}"
	)
	[[ -z "${CONFORMANCE_RUN_TEST:-}" ]] || args+=(-run-test="${CONFORMANCE_RUN_TEST}")
	[[ -z "${CONFORMANCE_HTTP1_ENGINE:-}" ]] || args+=(-coxswain.http1-engine="${CONFORMANCE_HTTP1_ENGINE}")
	skip="${CONFORMANCE_SKIP_TESTS:-}"
	if [[ "${mode}" == shared ]]; then
		# A shared pool Gateway has no ServiceAccount, Pod or Service of its own in its namespace
		# to carry spec.infrastructure metadata (docs/conformance.md): the report shows it skipped.
		skip="${skip:+${skip},}GatewayInfrastructureMetadata"
	fi
	[[ -z "${skip}" ]] || args+=(-skip-tests="${skip}")
	# shellcheck disable=SC2206 # CONFORMANCE_ARGS is split into words on purpose
	args+=(${CONFORMANCE_ARGS:-})

	echo "conformance: ${mode}: starting the cluster and the suite (log: ${log})"
	start=${SECONDS}
	set +e
	if [[ -n "${CONFORMANCE_VERBOSE:-}" ]]; then
		hack/cluster.sh run "${cluster_args[@]}" -- "${out}/conformance.test" "${args[@]}" 2>&1 | tee "${log}"
	else
		# The console shows the cluster's progress, the harness's own lines, each failed
		# assertion, each test's result and the summary; the log holds everything.
		hack/cluster.sh run "${cluster_args[@]}" -- "${out}/conformance.test" "${args[@]}" 2>&1 |
			tee "${log}" |
			grep --line-buffered -E '^ {4}--- (PASS|FAIL)|^--- FAIL|^conformance |^cluster: |^(PASS|FAIL)$|^ +conformance_test\.go:|^\s+Error:'
	fi
	status=${PIPESTATUS[0]}
	set -e
	elapsed=$((SECONDS - start))

	if [[ ! -s "${report}" ]]; then
		echo "conformance: ${mode}: no report after ${elapsed}s (exit status ${status}); the end of ${log}:" >&2
		tail -n 40 "${log}" >&2
		failed=1
		summaries+=("conformance ${mode}: no report")
		continue
	fi
	[[ ${status} -eq 0 ]] || failed=1
	summaries+=("conformance ${mode}: report ${report} (${elapsed}s, exit status ${status})")
	lines=0
	while IFS= read -r line; do
		summaries+=("${line}")
		lines=$((lines + 1))
	done < <(grep "^conformance ${mode} " "${log}")
	[[ ${lines} -gt 0 ]] || summaries+=("conformance ${mode}: no test ran; the reason is in ${log}")
done

echo
printf '%s\n' "${summaries[@]}"
exit "${failed}"
