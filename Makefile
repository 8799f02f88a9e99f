# Coxswain: a Kubernetes Gateway API implementation with a secured control channel.

# The Go toolchain, from hack/go-toolchain.sh (exported to every recipe).
export GOTOOLCHAIN := $(shell sed -n 's/^export GOTOOLCHAIN=//p' hack/go-toolchain.sh)

# Tool versions, pinned. Tools are installed into bin/ from the Go module proxy.
CONTROLLER_TOOLS_VERSION ?= v0.23.0
GOLANGCI_LINT_VERSION ?= v2.15.0
KUSTOMIZE_VERSION ?= v5.8.1
HELM_VERSION ?= v3.22.0
GOVULNCHECK_VERSION ?= v1.9.0
# The vulnerability reports govulncheck reads: golang.org/x/vulndb at this version, indexed
# locally by hack/vulndb.sh (vuln.go.dev is not needed).
VULNDB_VERSION ?= v0.0.0-20261105234957-e22db6528018
CRD_REF_DOCS_VERSION ?= v0.3.0
GATEWAY_API_VERSION ?= v1.7.0
# GATEWAY_API_CHANNEL picks the Gateway API CRDs that install, deploy, cluster and conformance
# use: standard (config/gateway-api) or experimental (config/gateway-api-experimental).
GATEWAY_API_CHANNEL ?= standard
ifeq ($(filter $(GATEWAY_API_CHANNEL),standard experimental),)
$(error GATEWAY_API_CHANNEL is standard or experimental, not $(GATEWAY_API_CHANNEL))
endif
CRD_DIR = $(if $(filter experimental,$(GATEWAY_API_CHANNEL)),config/crd-experimental,config/crd)
CHANNEL_OVERLAY = $(if $(filter experimental,$(GATEWAY_API_CHANNEL)),experimental)

LOCALBIN ?= $(CURDIR)/bin
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen-$(CONTROLLER_TOOLS_VERSION)
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
KUSTOMIZE ?= $(LOCALBIN)/kustomize-$(KUSTOMIZE_VERSION)
HELM ?= $(LOCALBIN)/helm-$(HELM_VERSION)
GOVULNCHECK ?= $(LOCALBIN)/govulncheck-$(GOVULNCHECK_VERSION)
CRD_REF_DOCS ?= $(LOCALBIN)/crd-ref-docs-$(CRD_REF_DOCS_VERSION)
KUBECTL ?= $(LOCALBIN)/k8s/kubectl

MODULES := . discovery proxy hack/nodeagent test/conformance hack/release
IMG ?= coxswain.dev/coxswain:dev
PROXY_IMG ?= coxswain.dev/coxswain-proxy:dev
GO_TEST_FLAGS ?= -race -count=1

# Shell setup: fail on the first error of a recipe line.
SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Display this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-15s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: controller-gen ## Generate CRDs and RBAC from markers; copy the pinned Gateway API CRDs.
	$(CONTROLLER_GEN) rbac:roleName=coxswain-manager crd:allowDangerousTypes=false paths="./api/..." paths="./controllers/..." paths="./internal/..." output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	hack/gateway-api-crds.sh $(GATEWAY_API_VERSION) config/gateway-api
	hack/gateway-api-crds.sh $(GATEWAY_API_VERSION) config/gateway-api-experimental experimental
	hack/release/chart-files.sh

.PHONY: generate
generate: controller-gen ## Generate deepcopy code and the discovery protocol.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."
	@if [ -x hack/proto.sh ]; then hack/proto.sh; fi

.PHONY: api-docs
api-docs: $(CRD_REF_DOCS) ## Generate docs/api-reference.md, the reference of CoxswainConfig and CoxswainGatewayParameters, from the Go types.
	$(CRD_REF_DOCS) --config hack/release/api-docs.yaml --source-path api/v1alpha1 --renderer markdown --log-level ERROR --output-path docs/api-reference.md

.PHONY: fmt
fmt: golangci-lint ## Format the code of every module.
	@for m in $(MODULES); do (cd $$m && $(GOLANGCI_LINT) fmt --config $(CURDIR)/.golangci.yml ./...); done

.PHONY: vet
vet: ## Run go vet on every module.
	@for m in $(MODULES); do (cd $$m && go vet ./...); done

.PHONY: lint
lint: golangci-lint ## Run golangci-lint on every module.
	@for m in $(MODULES); do echo "lint $$m"; (cd $$m && $(GOLANGCI_LINT) run --allow-parallel-runners --config $(CURDIR)/.golangci.yml ./...); done

.PHONY: test
test: k8s-assets coredns-assets kustomize helm ## Run every test of every module against a real kube-apiserver and etcd.
	@export KUBEBUILDER_ASSETS="$(LOCALBIN)/k8s" KUSTOMIZE="$(KUSTOMIZE)" HELM="$(HELM)"; \
	for m in $(MODULES); do echo "test $$m"; (cd $$m && go test $(GO_TEST_FLAGS) ./...); done
	@$(MAKE) --no-print-directory test-e2e

# The fuzz targets of parsers of untrusted bytes, as module:package:target; make fuzz runs each
# for FUZZTIME beyond its committed corpus (which every go test run replays already).
FUZZTIME ?= 10s
FUZZ_TARGETS := \
	proxy:./internal/dataplane/http1/:FuzzRequestHead \
	proxy:./internal/dataplane/http1/:FuzzChunked \
	proxy:./internal/dataplane/http1/:FuzzResponseHead \
	proxy:./internal/dataplane/h1client/:FuzzForwardRoundTrip \
	proxy:./internal/dataplane/h1client/:FuzzUpstreamStream \
	discovery:./routeset/:FuzzAssemble

.PHONY: fuzz
fuzz: ## Fuzz the HTTP/1.1 engine's parsers against net/http, and the route set assembly against the protobuf decoder, for FUZZTIME each (10s).
	@for t in $(FUZZ_TARGETS); do \
		IFS=: read -r mod pkg name <<<"$$t"; echo "fuzz $$mod $$pkg $$name for $(FUZZTIME)"; \
		(cd $$mod && go test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg) || exit 1; \
	done

.PHONY: test-e2e
test-e2e: k8s-assets kustomize helm ## Run the end-to-end suite on the local cluster: config/default, the external-ca overlay, upgrades with kubectl and helm (hack/e2e-cluster.sh).
	hack/e2e-cluster.sh

# Files that generators write: verify fails when regenerating them changes anything.
GENERATED := api/v1alpha1/zz_generated.deepcopy.go config/crd config/rbac/role.yaml config/gateway-api config/gateway-api-experimental \
	discovery/api charts/coxswain/files docs/api-reference.md $(foreach m,$(MODULES),$(m)/go.mod $(m)/go.sum)

.PHONY: verify
verify: manifests generate api-docs ## Regenerate code, manifests and go.sum; fail on any difference or stale golden file.
	@for m in $(MODULES); do (cd $$m && go mod tidy); done
	@changed="$$(git status --porcelain --untracked-files=all -- $(GENERATED))"; \
	if [ -n "$$changed" ]; then \
		echo "$$changed"; git --no-pager diff --stat -- $(GENERATED); \
		echo "verify: generated files are out of date: run 'make manifests generate', 'go mod tidy' in each module, and commit"; \
		exit 1; \
	fi
	go test -count=1 -run 'Golden' ./internal/graph/ ./internal/encode/ ./internal/provision/

.PHONY: conformance
conformance: k8s-assets ## Run the Gateway API conformance suite (GATEWAY-HTTP) on the local cluster; report in bin/conformance/ (CONFORMANCE_MODE=dedicated|shared|all, CONFORMANCE_RUN_TEST=<test>, GATEWAY_API_CHANNEL).
	GATEWAY_API_CHANNEL=$(GATEWAY_API_CHANNEL) hack/conformance.sh

.PHONY: bench
bench: ## Benchmark the proxy against nginx and haproxy on loopback (installs what it needs); writes BENCHMARKS.md figures.
	hack/bench.sh

# Where bench-control-plane writes its figures and profiles.
CONTROL_PLANE_BENCH ?= $(LOCALBIN)/bench/control-plane

.PHONY: bench-control-plane
bench-control-plane: k8s-assets ## Benchmark the control plane: rebuild per route edit and full compile, CSR signing, snapshot fan-out, full-snapshot CPU against bare grpc-go, idle stream memory, route propagation through the real proxy, and a 1,000-proxy bootstrap storm.
	mkdir -p $(CONTROL_PLANE_BENCH) && go test -run '^$$' -bench 'BenchmarkRouteEdit|BenchmarkFullRebuild|BenchmarkEndpointsChange|BenchmarkStatusPass' -benchmem -count 1 ./internal/rebuild/ | tee $(CONTROL_PLANE_BENCH)/rebuild.txt
	mkdir -p $(CONTROL_PLANE_BENCH) && go test -run '^$$' -bench 'BenchmarkBuildCompile/routes=1000$$' -benchmem -count 1 ./internal/graph/ | tee $(CONTROL_PLANE_BENCH)/graph.txt
	mkdir -p $(CONTROL_PLANE_BENCH) && go test -run '^$$' -bench 'BenchmarkRouteEdit/routes=5000/rebuild$$' -benchtime 300x -cpuprofile $(CONTROL_PLANE_BENCH)/route-edit.pprof -o $(CONTROL_PLANE_BENCH)/rebuild.test ./internal/rebuild/ && go tool pprof -top -cum -nodecount 50 $(CONTROL_PLANE_BENCH)/rebuild.test $(CONTROL_PLANE_BENCH)/route-edit.pprof | tee $(CONTROL_PLANE_BENCH)/route-edit-top.txt
	mkdir -p $(CONTROL_PLANE_BENCH) && cd discovery && go test -run '^$$' -bench 'BenchmarkSignCSR' -benchmem -benchtime 3s -cpu 1,2 ./pki/ | tee $(CONTROL_PLANE_BENCH)/sign.txt
	mkdir -p $(CONTROL_PLANE_BENCH) && cd discovery && COXSWAIN_BENCH=1 go test -count=1 -timeout 45m -v -run '^TestBench(FanoutDelta|FanoutPerStream|FullSnapshotCPU|IdleStreamMemory|TenThousandProxies)$$' ./server/stream/ | tee $(CONTROL_PLANE_BENCH)/stream.txt
	$(MAKE) bench-propagation
	mkdir -p $(CONTROL_PLANE_BENCH) && KUBEBUILDER_ASSETS="$${KUBEBUILDER_ASSETS:-$(LOCALBIN)/k8s}" COXSWAIN_MEASURE=1 go test -count 1 -run 'TestMeasureBootstrapStorm' -v ./internal/discoveryserver/ | tee $(CONTROL_PLANE_BENCH)/bootstrap-storm.txt

##@ Build

.PHONY: build
# Static binaries built as the release builds them (hack/release), so that a release, the local
# cluster and this target compile every package once between them.
BUILD_FLAGS := -trimpath

build: ## Build the operator and the proxy into bin/.
	CGO_ENABLED=0 go build $(BUILD_FLAGS) -o $(LOCALBIN)/coxswain .
	cd proxy && CGO_ENABLED=0 go build $(BUILD_FLAGS) -o $(LOCALBIN)/coxswain-proxy .
	cd discovery && go build ./...

.PHONY: run
run: k8s-assets manifests kustomize ## Run the operator against the configured cluster; with none, start the local cluster with Coxswain, sample Gateways and a backend (Ctrl-C stops it).
	go run ./hack/localcluster -- go run . $(ARGS)

.PHONY: cluster
cluster: k8s-assets manifests kustomize ## Start the local cluster (hack/cluster.sh run) with Coxswain deployed from config/default (GATEWAY_API_CHANNEL); Ctrl-C stops it. `hack/cluster.sh exec -- CMD` runs CMD inside.
	hack/cluster.sh run $(if $(CHANNEL_OVERLAY),--overlay $(CHANNEL_OVERLAY))

##@ Deployment

.PHONY: install
install: manifests kustomize k8s-assets ## Install our CRDs and the Gateway API CRDs (GATEWAY_API_CHANNEL) into the configured cluster.
	$(KUSTOMIZE) build $(CRD_DIR) | $(KUBECTL) apply --server-side -f -

.PHONY: uninstall
uninstall: manifests kustomize k8s-assets ## Remove our CRDs and the Gateway API CRDs (GATEWAY_API_CHANNEL) from the configured cluster.
	$(KUSTOMIZE) build $(CRD_DIR) | $(KUBECTL) delete --ignore-not-found -f -

# OVERLAY picks config/overlays/<name> (external-ca, cert-manager, experimental) instead of
# config/default; GATEWAY_API_CHANNEL=experimental without an OVERLAY picks experimental.
OVERLAY ?= $(CHANNEL_OVERLAY)
DEPLOY_DIR = $(if $(OVERLAY),config/overlays/$(OVERLAY),config/default)

.PHONY: deploy
deploy: manifests kustomize k8s-assets ## Deploy the operator and the shared proxy pool into the configured cluster (IMG, PROXY_IMG, OVERLAY).
	cd config/manager && $(KUSTOMIZE) edit set image controller=$(IMG)
	cd config/proxy && $(KUSTOMIZE) edit set image proxy=$(PROXY_IMG)
	$(KUSTOMIZE) build $(DEPLOY_DIR) | $(KUBECTL) apply --server-side -f -

.PHONY: undeploy
undeploy: kustomize k8s-assets ## Remove the operator, its CRDs and namespace from the configured cluster (OVERLAY).
	$(KUSTOMIZE) build $(DEPLOY_DIR) | $(KUBECTL) delete --ignore-not-found -f -

##@ Images

CONTAINER_TOOL ?= docker
# The version and revision stamped into the binaries and the images' labels, as make release does.
DOCKER_BUILD_ARGS ?= --build-arg VERSION=$(or $(VERSION),dev) --build-arg REVISION=$$(git rev-parse HEAD)

.PHONY: docker-build
docker-build: ## Build the operator (IMG) and proxy (PROXY_IMG) images.
	$(CONTAINER_TOOL) build -t $(IMG) -f Dockerfile $(DOCKER_BUILD_ARGS) .
	$(CONTAINER_TOOL) build -t $(PROXY_IMG) -f Dockerfile.proxy $(DOCKER_BUILD_ARGS) .

.PHONY: docker-push
docker-push: ## Push the operator (IMG) and proxy (PROXY_IMG) images.
	$(CONTAINER_TOOL) push $(IMG)
	$(CONTAINER_TOOL) push $(PROXY_IMG)

##@ Release

# VERSION is the release's version (vMAJOR.MINOR.PATCH[-PRERELEASE]); REGISTRY the registry and
# path its images and chart are named under (install.yaml and the chart pin them there).
VERSION ?=
REGISTRY ?= coxswain.dev
DIST ?= $(CURDIR)/dist
RELEASE_TOOL = $(LOCALBIN)/release

.PHONY: release-tool
release-tool: ## Build the release program (hack/release) into bin/release.
	go build -C hack/release -o $(RELEASE_TOOL) .

.PHONY: release
release: manifests kustomize helm release-tool ## Write a release into dist/ (VERSION, REGISTRY): multi-arch OCI images without Docker, install.yaml per variant, the Helm chart, SBOMs, SHA256SUMS.
	@[ -n "$(VERSION)" ] || { echo "release: set VERSION=vX.Y.Z"; exit 1; }
	$(RELEASE_TOOL) build --version $(VERSION) --revision "$$(git rev-parse HEAD)$$(git diff --quiet HEAD -- || echo -dirty)" --source-date-epoch "$$(git log -1 --format=%ct)" \
		--registry $(REGISTRY) --root $(CURDIR) --out $(DIST) --kustomize $(KUSTOMIZE) --helm $(HELM)

.PHONY: push
push: release-tool ## Push the images and the chart (OCI) of dist/ to REGISTRY, the registry the release was built for.
	$(RELEASE_TOOL) push --dist $(DIST) --registry $(REGISTRY)

.PHONY: helm-lint
helm-lint: helm ## Lint the Helm chart (charts/coxswain) with the pinned helm.
	$(HELM) lint --strict charts/coxswain

.PHONY: test-chart
test-chart: kustomize helm k8s-assets ## Render the chart and each kustomize variant and compare their objects; helm lint; helm install, upgrade and uninstall on a real API server.
	KUBEBUILDER_ASSETS="$(LOCALBIN)/k8s" KUSTOMIZE="$(KUSTOMIZE)" HELM="$(HELM)" go test -count=1 ./test/chart/

.PHONY: govulncheck
govulncheck: $(GOVULNCHECK) ## Fail on a vulnerable symbol any module calls (the reports of golang.org/x/vulndb at VULNDB_VERSION, hack/vulndb.sh).
	@db="$$(hack/vulndb.sh $(VULNDB_VERSION))"; \
	for m in $(MODULES); do echo "govulncheck $$m"; (cd $$m && $(GOVULNCHECK) -db "file://$$db" ./...) || exit 1; done

##@ Dependencies

.PHONY: helm
helm: $(HELM)
$(HELM):
	$(call go-install-tool,$(HELM),helm.sh/helm/v3/cmd/helm,$(HELM_VERSION))

$(GOVULNCHECK):
	$(call go-install-tool,$(GOVULNCHECK),golang.org/x/vuln/cmd/govulncheck,$(GOVULNCHECK_VERSION))

$(CRD_REF_DOCS):
	$(call go-install-tool,$(CRD_REF_DOCS),github.com/elastic/crd-ref-docs,$(CRD_REF_DOCS_VERSION))

.PHONY: coredns-assets
coredns-assets: ## Build (or take from the cache) CoreDNS for the local cluster's DNS into bin/coredns.
	@hack/coredns-assets.sh >/dev/null

.PHONY: k8s-assets
k8s-assets: ## Build (or take from the cache) etcd, kube-apiserver, kube-controller-manager and kubectl into bin/k8s.
	@hack/k8s-assets.sh >/dev/null

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN)
$(CONTROLLER_GEN):
	$(call go-install-tool,$(CONTROLLER_GEN),sigs.k8s.io/controller-tools/cmd/controller-gen,$(CONTROLLER_TOOLS_VERSION))

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT)
$(GOLANGCI_LINT):
	$(call go-install-tool,$(GOLANGCI_LINT),github.com/golangci/golangci-lint/v2/cmd/golangci-lint,$(GOLANGCI_LINT_VERSION))

.PHONY: kustomize
kustomize: $(KUSTOMIZE)
$(KUSTOMIZE):
	$(call go-install-tool,$(KUSTOMIZE),sigs.k8s.io/kustomize/kustomize/v5,$(KUSTOMIZE_VERSION))

# go-install-tool installs package $(2) at version $(3) as $(1).
define go-install-tool
@[ -f "$(1)" ] || { \
set -e; \
echo "Installing $(2)@$(3)"; \
tmp=$$(mktemp -d); \
GOBIN=$$tmp go install $(2)@$(3); \
mkdir -p $(LOCALBIN); \
mv $$tmp/* $(1); \
rm -rf $$tmp; \
}
endef

.PHONY: bench-propagation
bench-propagation: k8s-assets ## Measure route propagation through the real proxy (create, delete, endpoint shift; 1 to 3,000 routes; with churn).
	@mkdir -p $(CONTROL_PLANE_BENCH); \
	export KUBEBUILDER_ASSETS="$(LOCALBIN)/k8s" COXSWAIN_BENCH_PROPAGATION=1 COXSWAIN_BENCH_PROPAGATION_OUT="$(CONTROL_PLANE_BENCH)/propagation.md" COXSWAIN_BENCH_PROPAGATION_PROFILES="$(CONTROL_PLANE_BENCH)"; \
	go test -count=1 -timeout 60m -run 'TestRoutePropagation' -v ./test/e2e/ 2>&1 | tee "$(CONTROL_PLANE_BENCH)/propagation.log" | grep -E '^\s*(propagation_test|--- |ok|FAIL|\|)'; \
	echo "results: $(CONTROL_PLANE_BENCH)/propagation.md, log: $(CONTROL_PLANE_BENCH)/propagation.log"
