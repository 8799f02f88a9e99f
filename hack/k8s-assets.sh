#!/usr/bin/env bash
# Builds the real control plane used by the tests and by `make run` (etcd, kube-apiserver,
# kube-controller-manager and kubectl) from the Go module proxy at pinned versions, caches the binaries outside
# the clone (keyed by version) and links them into bin/k8s/.
#
#   hack/k8s-assets.sh            # build if needed, then link; prints the asset directory
#
# A cold build takes several minutes on two cores and reports progress; a cache hit takes seconds.
set -euo pipefail
# An upstream build: the machine's own Go, whatever the Makefile exports (hack/go-toolchain.sh).
export GOTOOLCHAIN=local

KUBE_VERSION="${KUBE_VERSION:-v1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
# RECIPE changes whenever what this script builds changes, so a stale cache is never reused.
RECIPE=2

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache_base="${COXSWAIN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/coxswain}"
cache="${cache_base}/k8s/kube-${KUBE_VERSION}-etcd-${ETCD_VERSION}-r${RECIPE}"
link_dir="${root}/bin/k8s"

log() { printf 'k8s-assets: %s\n' "$*" >&2; }

# run_with_progress LABEL CMD...: runs CMD, printing the elapsed time every 30 s so a long build
# never goes silent.
run_with_progress() {
  local label="$1"; shift
  local start=$SECONDS
  "$@" &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    for _ in $(seq 1 30); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 1
    done
    kill -0 "$pid" 2>/dev/null && log "${label}: still running ($((SECONDS - start))s elapsed)"
  done
  if wait "$pid"; then
    log "${label}: done in $((SECONDS - start))s"
  else
    log "${label}: failed after $((SECONDS - start))s"
    return 1
  fi
}

build_kube() {
  local work="$1" out="$2"
  local kdir
  # From the work directory: the clone's go.mod asks for a newer Go than the machine's, which
  # GOTOOLCHAIN=local refuses to run in.
  kdir="$(cd "$work" && go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [ -n "$kdir" ] || { log "cannot download k8s.io/kubernetes@${KUBE_VERSION}"; return 1; }
  local staging="v0.${KUBE_VERSION#v1.}"
  mkdir -p "$work/kube"
  {
    printf 'module coxswain.dev/k8sbuild\n\ngo 1.26\n\nrequire k8s.io/kubernetes %s\n\n' "$KUBE_VERSION"
    # One replace per staging module, taken from k8s.io/kubernetes's own go.mod so it never drifts.
    sed -n 's#^[[:space:]]*\(k8s.io/[^[:space:]]*\) => ./staging/src/.*#replace \1 => \1 '"$staging"'#p' "$kdir/go.mod"
  } >"$work/kube/go.mod"
  cat >"$work/kube/main.go" <<'GO'
// Command k8s is a multi-call binary: it runs the Kubernetes server named by its argv[0].
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kubectl "k8s.io/kubectl/pkg/cmd"
)

func main() {
	commands := map[string]func() *cobra.Command{
		"kube-apiserver":          apiserver.NewAPIServerCommand,
		"kube-controller-manager": controllermanager.NewControllerManagerCommand,
		"kubectl":                 kubectl.NewDefaultKubectlCommand,
	}
	name := filepath.Base(os.Args[0])
	newCommand, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "%s: run me as kube-apiserver, kube-controller-manager or kubectl\n", name)
		os.Exit(2)
	}
	os.Exit(cli.Run(newCommand()))
}
GO
  local pkg=k8s.io/component-base/version
  local ldflags="-s -w -X ${pkg}.gitVersion=${KUBE_VERSION} -X ${pkg}.gitMajor=1"
  ldflags+=" -X ${pkg}.gitMinor=$(echo "$KUBE_VERSION" | cut -d. -f2) -X ${pkg}.gitTreeState=clean"
  ldflags+=" -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
  (cd "$work/kube" && run_with_progress "resolve k8s.io/kubernetes ${KUBE_VERSION} modules" go mod tidy)
  (cd "$work/kube" && CGO_ENABLED=0 run_with_progress "compile kube-apiserver + kube-controller-manager + kubectl ${KUBE_VERSION}" \
    go build -trimpath -ldflags "$ldflags" -o "$out/k8s" .)
}

build_etcd() {
  local work="$1" out="$2"
  mkdir -p "$work/etcd"
  printf 'module coxswain.dev/etcdbuild\n\ngo 1.26\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" >"$work/etcd/go.mod"
  cat >"$work/etcd/main.go" <<'GO'
// Command etcd runs the etcd server.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  (cd "$work/etcd" && run_with_progress "resolve etcd ${ETCD_VERSION} modules" go mod tidy)
  (cd "$work/etcd" && CGO_ENABLED=0 run_with_progress "compile etcd ${ETCD_VERSION}" \
    go build -trimpath -ldflags "-s -w" -o "$out/etcd" .)
}

if [ ! -x "$cache/k8s" ] || [ ! -x "$cache/etcd" ]; then
  log "building the control plane into ${cache} (kube ${KUBE_VERSION}, etcd ${ETCD_VERSION}); a cold build takes several minutes"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  staged="${cache}.tmp.$$"
  rm -rf "$staged" && mkdir -p "$staged"
  [ -x "$cache/etcd" ] && cp "$cache/etcd" "$staged/etcd" || build_etcd "$work" "$staged"
  [ -x "$cache/k8s" ] && cp "$cache/k8s" "$staged/k8s" || build_kube "$work" "$staged"
  ln -sf k8s "$staged/kube-apiserver"
  ln -sf k8s "$staged/kube-controller-manager"
  ln -sf k8s "$staged/kubectl"
  rm -rf "$cache" && mkdir -p "$(dirname "$cache")" && mv "$staged" "$cache"
fi

mkdir -p "$link_dir"
for bin in etcd kube-apiserver kube-controller-manager kubectl; do
  ln -sfn "$cache/$bin" "$link_dir/$bin"
done
# The multi-call binary dispatches on argv[0], so the links resolve to names it knows.
ln -sfn "$cache/k8s" "$link_dir/k8s"
echo "$link_dir"
