#!/usr/bin/env bash
# Generates the Go code of the discovery protocol from discovery/api/**/*.proto.
#
#   hack/proto.sh        # install the pinned tools into bin/ if needed, then buf generate
#
# The tools are pinned below and installed with `go install` into bin/ (GOBIN); an install is
# skipped when bin/ already holds the pinned version. Generated .pb.go files are committed, so a
# run on an unchanged tree leaves the tree unchanged.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/go-toolchain.sh"

BUF_VERSION="v1.75.0"
PROTOC_GEN_GO_VERSION="v1.36.12"
PROTOC_GEN_GO_GRPC_VERSION="v1.6.2"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${root}/bin"
mkdir -p "${bin}"

log() { printf 'proto: %s\n' "$*" >&2; }

# installed_version BINARY prints the module version `go version -m` finds in BINARY, or nothing.
installed_version() {
  [[ -x "$1" ]] || return 0
  go version -m "$1" 2>/dev/null | awk '$1 == "mod" { print $3; exit }'
}

# ensure NAME PACKAGE VERSION installs PACKAGE@VERSION as bin/NAME unless it is already there.
ensure() {
  local name="$1" pkg="$2" version="$3"
  if [[ "$(installed_version "${bin}/${name}")" == "${version}" ]]; then
    return 0
  fi
  log "installing ${pkg}@${version}"
  GOBIN="${bin}" go install "${pkg}@${version}"
}

ensure buf github.com/bufbuild/buf/cmd/buf "${BUF_VERSION}"
ensure protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "${PROTOC_GEN_GO_VERSION}"
ensure protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "${PROTOC_GEN_GO_GRPC_VERSION}"

cd "${root}/discovery"
# Local plugins only: bin/ first on PATH so buf finds the pinned protoc-gen-go*.
PATH="${bin}:${PATH}" "${bin}/buf" generate
log "generated $(find api -name '*.pb.go' | wc -l | tr -d ' ') files under discovery/api"
