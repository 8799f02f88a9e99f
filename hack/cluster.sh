#!/usr/bin/env bash
# A whole local cluster without Docker or root: etcd, kube-apiserver, kube-controller-manager
# and the node agent (hack/nodeagent) from the cached binaries, with Coxswain deployed from
# config/default as `make deploy` would, all inside fresh user, network, PID and mount
# namespaces whose network has no route out. See docs/local-cluster.md ("Run the cluster").
#
#   hack/cluster.sh run [--images FILE] [--overlay NAME] [--from DIR [--helm]] [--wait none|operator|pool] [--] [CMD ARG...]
#       Build what the cluster runs (the release images of the operator and the proxy for this
#       machine's platform, as make release builds them, into bin/cluster/release; the node
#       agent), start the cluster with a registry inside serving those images, deploy Coxswain
#       pinned to them and wait until it is ready; then run CMD inside the
#       cluster's namespaces with KUBECONFIG set and exit with its status after tearing
#       everything down, or, without CMD, stay up until Ctrl-C.
#       --images FILE adds `IMAGE PATH` lines to the node's image map (paths relative to FILE's
#       directory); --wait operator stops waiting once the operator is Available, --wait pool
#       (the default) waits for the shared proxy pool too, --wait none only until the manifests
#       are applied (for an operator that cannot turn Ready, as external-ca without its Secret).
#       --overlay NAME deploys config/overlays/NAME instead of config/default.
#       --from DIR deploys an earlier release instead: its kustomize tree DIR/src/config and its
#       images DIR/release (hack/upgrade-from.sh prepares both); this tree's release is then
#       served too and given to CMD as the release to upgrade to (COXSWAIN_UPGRADE_MANIFEST).
#       --helm (with --from) installs that release's chart with helm instead, and gives CMD this
#       tree's chart to upgrade to (COXSWAIN_UPGRADE_CHART).
#   hack/cluster.sh exec [--] [CMD ARG...]
#       Run CMD (default: bash) inside the running cluster's namespaces, KUBECONFIG set.
#
# State: bin/cluster/ (admin.kubeconfig, cluster.pid, images.txt, release/, logs/ of every component).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/go-toolchain.sh"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
state="${root}/bin/cluster"
export COXSWAIN_CLUSTER_START="${COXSWAIN_CLUSTER_START:-$(date +%s.%N)}"

usage() {
	sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
	exit 2
}

say() {
	printf 'cluster: [%6.1fs] %s\n' "$(awk -v a="${COXSWAIN_CLUSTER_START}" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')" "$*" >&2
}

# build makes every binary the cluster runs; nothing can be fetched once inside.
build() {
	cd "${root}"
	hack/k8s-assets.sh >/dev/null
	hack/coredns-assets.sh >/dev/null
	make -s kustomize >/dev/null
	kustomize="${root}/bin/kustomize-$(awk '$1 == "KUSTOMIZE_VERSION" { print $3 }' Makefile)"
	mkdir -p "${state}/bin"
	export CGO_ENABLED=0
	# The images the release ships, for this machine only: the same binaries (stamped, -trimpath),
	# the same layers and configuration, by the same program as make release.
	make -s release-tool >/dev/null
	local revision
	revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- 2>/dev/null || echo -dirty)"
	bin/release images --revision "${revision}" --source-date-epoch "$(git log -1 --format=%ct 2>/dev/null || echo 0)" \
		--root "${root}" --out "${state}/release" 2>"${state}/release.log" || {
		cat "${state}/release.log" >&2
		exit 1
	}
	(cd hack/nodeagent && go build -o "${state}/bin/nodeagent" . &&
		go build -o "${state}/bin/cluster" ./cmd/cluster &&
		go build -o "${state}/bin/echo" ./cmd/echo)
	say "built the release images (bin/cluster/release), the node agent and the sample echo server (CoreDNS: bin/coredns)"
}

cmd_run() {
	local args=() kustomize pid from="" with_helm=""
	while [[ $# -gt 0 ]]; do
		case "$1" in
		--images)
			[[ $# -ge 2 ]] || usage
			args+=("--images=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")")
			shift 2
			;;
		--images=*)
			local f="${1#--images=}"
			args+=("--images=$(cd "$(dirname "$f")" && pwd)/$(basename "$f")")
			shift
			;;
		--overlay)
			[[ $# -ge 2 ]] || usage
			args+=("--overlay=$2")
			shift 2
			;;
		--overlay=*)
			args+=("$1")
			shift
			;;
		--from)
			[[ $# -ge 2 ]] || usage
			from="$(cd "$2" && pwd)"
			shift 2
			;;
		--helm)
			with_helm=1
			shift
			;;
		--wait)
			[[ $# -ge 2 ]] || usage
			args+=("--wait=$2")
			shift 2
			;;
		--wait=*)
			args+=("$1")
			shift
			;;
		--)
			shift
			break
			;;
		-h | --help) usage ;;
		-*)
			echo "hack/cluster.sh run: unknown option $1" >&2
			usage
			;;
		*) break ;;
		esac
	done
	if pid="$(cat "${state}/cluster.pid" 2>/dev/null)" && kill -0 "${pid}" 2>/dev/null; then
		echo "hack/cluster.sh run: a cluster is already running (pid ${pid}): use hack/cluster.sh exec, or stop it first" >&2
		exit 1
	fi
	build
	cd "${root}"
	local deploy=(--config="${root}/config" --release="${state}/release")
	if [[ -n "${from}" ]]; then
		deploy=(--config="${from}/src/config" --release="${from}/release" --next-config="${root}/config" --next-release="${state}/release")
		if [[ -n "${with_helm}" ]]; then
			make -s helm >/dev/null
			deploy+=(--helm="${root}/bin/helm-$(awk '$1 == "HELM_VERSION" { print $3 }' Makefile)"
				--chart="${from}/src/charts/coxswain" --next-chart="${root}/charts/coxswain")
		fi
	elif [[ -n "${with_helm}" ]]; then
		echo "hack/cluster.sh run: --helm goes with --from" >&2
		exit 2
	fi
	exec "${state}/bin/cluster" run \
		--state="${state}" --assets="${root}/bin/k8s" --agent="${state}/bin/nodeagent" --coredns="${root}/bin/coredns" \
		--kustomize="${kustomize}" "${deploy[@]}" \
		--image="coxswain.dev/echo:dev=${state}/bin/echo" \
		"${args[@]}" -- "$@"
}

cmd_exec() {
	[[ "${1:-}" == "--" ]] && shift
	[[ $# -gt 0 ]] || set -- bash
	local pid
	if ! pid="$(cat "${state}/cluster.pid" 2>/dev/null)" || ! kill -0 "${pid}" 2>/dev/null; then
		echo "hack/cluster.sh exec: no cluster is running (start one with hack/cluster.sh run)" >&2
		exit 1
	fi
	[[ -f "${state}/admin.kubeconfig" ]] || echo "hack/cluster.sh exec: the cluster is still starting: no admin kubeconfig yet" >&2
	# --preserve-credentials keeps our uid, which the namespace maps to its root; without it
	# nsenter calls setgroups, which a user namespace made by --map-root-user denies to an
	# unprivileged user (tried as nobody: "setgroups failed: Operation not permitted").
	exec nsenter --user --net --mount --pid --target "${pid}" --preserve-credentials --wd="${PWD}" -- \
		env -u HTTP_PROXY -u HTTPS_PROXY -u ALL_PROXY -u NO_PROXY -u http_proxy -u https_proxy -u all_proxy -u no_proxy \
		KUBECONFIG="${state}/admin.kubeconfig" PATH="${root}/bin/k8s:${PATH}" "$@"
}

case "${1:-}" in
run)
	shift
	cmd_run "$@"
	;;
exec)
	shift
	cmd_exec "$@"
	;;
*) usage ;;
esac
