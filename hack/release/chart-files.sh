#!/usr/bin/env bash
# Copies into the chart the parts of config/ it installs as they are. Our CRDs go to
# charts/coxswain/crds/, which Helm creates before anything else and waits for until the API
# server serves them, so the chart's CoxswainConfig can be an ordinary object of the release.
# Into charts/coxswain/files/ go the pinned Gateway API CRDs (standard channel), rendered by a
# template so that a value can leave them to the cluster's owner and helm upgrade upgrades them,
# the RBAC roles controller-gen generates, the admission policy and the Grafana dashboards. `make manifests` runs it,
# `make verify` checks the copies are current, and the chart test compares what the chart renders
# with kustomize's output.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
chart=charts/coxswain
files=$chart/files
rm -rf "$files" "$chart/crds"
mkdir -p "$chart/crds" "$files/crds/gateway-api" "$files/rbac" "$files/admission" "$files/grafana"
cp config/crd/bases/*.yaml "$chart/crds/"
for f in config/gateway-api/*.yaml; do
	[ "$(basename "$f")" = kustomization.yaml ] || cp "$f" "$files/crds/gateway-api/"
done
cp config/rbac/role.yaml "$files/rbac/"
cp config/admission/controller_writes_policy.yaml "$files/admission/"
cp config/grafana/*.json "$files/grafana/"
