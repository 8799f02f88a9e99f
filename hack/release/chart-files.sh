#!/usr/bin/env bash
# Copies into charts/coxswain/files/ the parts of config/ the chart renders as they are: our CRDs,
# the pinned Gateway API CRDs (standard channel), the RBAC roles controller-gen generates and the
# admission policy. `make manifests` runs it, `make verify` checks the copies are current, and the
# chart test compares what the chart renders with kustomize's output.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
files=charts/coxswain/files
rm -rf "$files"
mkdir -p "$files/crds/coxswain" "$files/crds/gateway-api" "$files/rbac" "$files/admission"
cp config/crd/bases/*.yaml "$files/crds/coxswain/"
for f in config/gateway-api/*.yaml; do
	[ "$(basename "$f")" = kustomization.yaml ] || cp "$f" "$files/crds/gateway-api/"
done
cp config/rbac/role.yaml "$files/rbac/"
cp config/admission/controller_writes_policy.yaml "$files/admission/"
