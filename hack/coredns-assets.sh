#!/usr/bin/env bash
# Builds CoreDNS for the local cluster's DNS (the node agent's --dns-server) from the wrapper
# module hack/coredns (pinned in its go.mod and go.sum: CoreDNS with the bind, errors,
# kubernetes and ready plugins only), caches the binary outside the clone (keyed by the
# CoreDNS version and a hash of the wrapper) and links it to bin/coredns.
#
#   hack/coredns-assets.sh        # build if needed, then link; prints the binary's path
#
# A cold build takes a few minutes on two cores (about 3 min of CPU; 17 s with a warm Go build
# cache); a cache hit takes none.
set -euo pipefail
# An upstream build: the machine's own Go, whatever the Makefile exports (hack/go-toolchain.sh).
export GOTOOLCHAIN=local

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="${root}/hack/coredns"
version="$(sed -n 's#^require github.com/coredns/coredns \(v[^[:space:]]*\)$#\1#p' "${src}/go.mod")"
[ -n "$version" ] || { echo "coredns-assets: no CoreDNS version in ${src}/go.mod" >&2; exit 1; }
recipe="$(cat "${src}/go.mod" "${src}/go.sum" "${src}/main.go" | sha256sum | cut -c1-12)"
cache_base="${COXSWAIN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/coxswain}"
cache="${cache_base}/coredns/coredns-${version}-${recipe}"
link="${root}/bin/coredns"

log() { printf 'coredns-assets: %s\n' "$*" >&2; }

if [ ! -x "${cache}/coredns" ]; then
  log "building CoreDNS ${version} into ${cache}; a cold build takes a few minutes"
  staged="${cache}.tmp.$$"
  rm -rf "$staged" && mkdir -p "$staged"
  trap 'rm -rf "$staged"' EXIT
  start=$SECONDS
  (cd "$src" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "-s -w" -o "${staged}/coredns" .) &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    for _ in $(seq 1 30); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 1
    done
    kill -0 "$pid" 2>/dev/null && log "compile CoreDNS ${version}: still running ($((SECONDS - start))s elapsed)"
  done
  wait "$pid" || { log "compile CoreDNS ${version}: failed after $((SECONDS - start))s"; exit 1; }
  log "compile CoreDNS ${version}: done in $((SECONDS - start))s"
  rm -rf "$cache" && mkdir -p "$(dirname "$cache")" && mv "$staged" "$cache"
fi

mkdir -p "${root}/bin"
ln -sfn "${cache}/coredns" "$link"
echo "$link"
