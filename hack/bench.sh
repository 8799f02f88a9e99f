#!/usr/bin/env bash
# Data plane benchmark (make bench): Coxswain's proxy against nginx and haproxy on loopback.
#
# Installs what it needs: nginx, haproxy, wrk, h2load (nghttp2-client) and strace from Debian
# packages when missing (as root), vegeta from the Go module proxy into bin/. Then runs the Go
# benchmarks of the data plane (router match, whole request path with allocations, applying a
# 10,000-route snapshot, the HTTP/1.1 codec's parsers) and the side-by-side load runs: each
# proxy pinned alone to CPU 0 with one worker, the load generators and the backend on CPU 1,
# all on 127.0.0.1; the data plane runs once per HTTP/1.1 engine (coxswain-native,
# coxswain-nethttp) beside nginx. Every run is bounded (10 s by default) and stops by itself.
# The runner fails, and this script with it, when a measurement is missing, when requests
# fail, or when a benchmark port is held by another process.
# Results go to bin/bench/: go-bench.txt, results.md, and a CPU profile of the data plane for
# every scenario above its target (cpu-<scenario>.pprof).
#
# Usage: hack/bench.sh [runner flags], e.g. hack/bench.sh -quick or hack/bench.sh -duration 5s
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/go-toolchain.sh"

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN="$ROOT/bin"
OUT="$BIN/bench"
VEGETA_VERSION=v12.13.0
VEGETA="$BIN/vegeta-$VEGETA_VERSION"
mkdir -p "$OUT"

install_packages() {
  local missing=()
  command -v nginx >/dev/null || missing+=(nginx)
  command -v haproxy >/dev/null || missing+=(haproxy)
  command -v wrk >/dev/null || missing+=(wrk)
  command -v h2load >/dev/null || missing+=(nghttp2-client)
  command -v taskset >/dev/null || missing+=(util-linux)
  command -v strace >/dev/null || missing+=(strace)
  if ((${#missing[@]} == 0)); then
    return
  fi
  if [[ $(id -u) != 0 ]]; then
    echo "bench: missing ${missing[*]}; run as root to install them with apt-get" >&2
    exit 1
  fi
  echo "bench: installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

install_vegeta() {
  if [[ ! -x "$VEGETA" ]]; then
    echo "bench: installing vegeta $VEGETA_VERSION" >&2
    local tmp
    tmp=$(mktemp -d)
    GOBIN="$tmp" go install "github.com/tsenart/vegeta/v12@$VEGETA_VERSION"
    mv "$tmp/vegeta" "$VEGETA"
    rm -rf "$tmp"
  fi
}

if (($(nproc) < 2)); then
  echo "bench: needs two CPUs (proxy on one, load and backend on the other)" >&2
  exit 1
fi
install_packages
install_vegeta

cd "$ROOT/proxy"
go build -o "$BIN/bench-backend" ./bench/backend
go build -o "$BIN/bench-coxswain" ./bench/coxswain
go build -o "$BIN/bench-minimal" ./bench/minimal
go build -o "$BIN/bench-runner" ./bench/runner

echo "bench: Go benchmarks" >&2
go test -run '^$' -bench 'BenchmarkMatch|BenchmarkServe|BenchmarkApply|BenchmarkParse' -benchmem -benchtime 2s \
  ./internal/dataplane/ ./internal/dataplane/router/ ./internal/dataplane/forward/ ./internal/dataplane/http1/ |
  tee "$OUT/go-bench.txt"

echo "bench: load runs" >&2
"$BIN/bench-runner" -bin "$BIN" -vegeta "$VEGETA" -out "$OUT/results.md" -profiles "$OUT" "$@"
