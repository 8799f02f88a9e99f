#!/usr/bin/env bash
# Prepares the release an upgrade test starts from and prints its directory: the tree of the
# commit hack/upgrade-from names (or COXSWAIN_UPGRADE_FROM) in DIR/src, and its release images
# for this machine in DIR/release, built by this tree's release program (bin/release images)
# from that tree's sources, as make release would have built them then. Cached outside the
# clone under ~/.cache/coxswain/upgrade-from/, keyed by the commit and the release program's
# sources. hack/cluster.sh run --from DIR deploys it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/go-toolchain.sh"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
from="${COXSWAIN_UPGRADE_FROM:-$(awk '!/^#/ && NF { print $1; exit }' hack/upgrade-from)}"
if ! commit="$(git rev-parse --verify --quiet "${from}^{commit}")"; then
	echo "hack/upgrade-from.sh: ${from} is not a commit of this clone (a shallow clone lacks it: fetch the history)" >&2
	exit 1
fi
tool="$(find hack/release -maxdepth 1 -name '*.go' ! -name '*_test.go' | sort | xargs cat hack/release/go.mod hack/release/go.sum | sha256sum | cut -c1-12)"
dir="${COXSWAIN_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/coxswain}/upgrade-from/${commit:0:12}-${tool}"
if [[ ! -f "${dir}/release/images.json" ]]; then
	rm -rf "${dir}"
	mkdir -p "${dir}/src"
	git archive "${commit}" | tar -x -C "${dir}/src"
	make -s release-tool >/dev/null
	echo "upgrade-from: building the release images of ${commit:0:12} in ${dir}" >&2
	bin/release images --version v0.0.0-upgrade-from --revision "${commit}" \
		--source-date-epoch "$(git log -1 --format=%ct "${commit}")" \
		--root "${dir}/src" --out "${dir}/release.partial" >&2
	mv "${dir}/release.partial" "${dir}/release"
fi
echo "${dir}"
