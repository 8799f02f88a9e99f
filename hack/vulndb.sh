#!/usr/bin/env bash
# Builds the Go vulnerability database govulncheck reads (the v1 layout vuln.go.dev serves)
# without vuln.go.dev: the OSV files of golang.org/x/vulndb at VERSION (the Makefile pins it:
# VULNDB_VERSION), fetched through the Go module proxy, indexed by that module's own
# cmd/indexdb. Caches the database outside the clone, keyed by VERSION, links it to bin/vulndb
# and prints its path.
#
#   hack/vulndb.sh VERSION
#
# Bump VULNDB_VERSION (go list -m golang.org/x/vulndb@latest) to learn of newer reports.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/go-toolchain.sh"

version="${1:?usage: hack/vulndb.sh VERSION}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache_base="${COXSWAIN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/coxswain}"
cache="${cache_base}/vulndb/${version}"
if [ ! -f "${cache}/index/db.json" ]; then
	dir="$(go mod download -json "golang.org/x/vulndb@${version}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
	[ -d "${dir}/data/osv" ] || {
		echo "vulndb: golang.org/x/vulndb@${version} has no data/osv" >&2
		exit 1
	}
	staged="${cache}.tmp.$$"
	rm -rf "${staged}"
	trap 'rm -rf "${staged}"' EXIT
	echo "vulndb: indexing $(find "${dir}/data/osv" -name '*.json' | wc -l) reports of golang.org/x/vulndb@${version}" >&2
	go run "golang.org/x/vulndb/cmd/indexdb@${version}" -vulns "${dir}/data/osv" -out "${staged}"
	mkdir -p "$(dirname "${cache}")"
	mv "${staged}" "${cache}"
fi
mkdir -p "${root}/bin"
ln -sfn "${cache}" "${root}/bin/vulndb"
echo "${cache}"
