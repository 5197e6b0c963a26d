SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
GO ?= go
export GOFLAGS := -buildvcs=false
export CGO_ENABLED := 0
VERSION ?= $(shell cat VERSION)
# The commit is passed in the link flags (the toolchain's VCS stamp is off:
# -buildvcs=false), "-dirty" when the tree has uncommitted changes.
COMMIT ?= $(shell bash hack/commit.sh)
LDFLAGS := -s -w -X github.com/mesh-cni/mesh-cni/internal/version.Version=$(VERSION) \
	-X github.com/mesh-cni/mesh-cni/internal/version.Commit=$(COMMIT)
BIN := $(CURDIR)/bin
# Four test packages at a time: most of their time is spent waiting (on
# an API server, a dial, a subprocess), not on the CPU. hack's TestRelease
# cross-builds both platforms: more than go test's default 10m on a loaded
# 2-core machine.
GOTEST := $(GO) test -count=1 -p 4 -timeout 30m

.PHONY: lint release release-compile release-tools chart-readme bench-plugin bench-podcache bench-cluster all build deps k8s-bins istio-bins istio-goldens test test-unit test-fuzz bench bench-agent clean image image-tar chart-lint chart-tools kustomize-base generate test-chart bench-chart

all: build

deps:
	@bash hack/deps.sh

## build: static binaries into bin/ (mesh-cnictl also as kubectl-mesh_cni, the kubectl plugin)
build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/mesh-cni ./plugin
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/mesh-cni-podget ./cmd/mesh-cni-podget
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/mesh-cnictl ./cmd/mesh-cnictl
	ln -sf mesh-cnictl $(BIN)/kubectl-mesh_cni
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/mesh-cni-agent ./installer
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/mesh-cni-validator ./cmd/mesh-cni-validator
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/mesh-cni-metrics-proxy ./cmd/mesh-cni-metrics-proxy

## test: every test (the README's test command); lint first, it fails fast. Then the registry and
## the two releases of test-e2e-ci (hack/e2e-registry.sh), and three lanes side by side
## (hack/lanes.sh): the host's tests (unit, fuzz, chart, Istio's install-cni), the kind clusters
## of test-e2e-ci from that registry, and the Cilium cluster's cilium spec (this checkout's chart
## and image tarball), which mostly wait on pods; every image they use is built before.
test: lint deps build release-compile k8s-bins istio-bins release-tools chart-tools image-tar testproxy-tar kind-image flannel-tar istio-images cilium-tar
	@bash hack/e2e-registry.sh bash hack/lanes.sh \
	  host '$(MAKE) --no-print-directory test-unit test-fuzz test-chart test-istio-install-cni' \
	  kind '$(MAKE) --no-print-directory e2e-ci-clusters' \
	  cilium 'env -u E2E_RELEASE -u E2E_PREVIOUS_RELEASE -u E2E_REGISTRY_PORT $(MAKE) --no-print-directory e2e-cilium-cluster E2E_LABELS=cilium'

## lint: go vet (the e2e suite with its build tag too), then golangci-lint with .golangci.yml
## (pinned in hack/lint/go.mod, built once by hack/build-tools.sh)
lint:
	for m in . charts docs; do $(GO) -C $$m vet ./...; done
	$(GO) -C e2e vet -tags e2e ./...
	lint=$$(bash hack/build-tools.sh golangci-lint | tail -n1)/golangci-lint; for m in . charts docs e2e; do (cd $$m && $$lint run ./...); done

## k8s-bins: etcd, kube-apiserver, kube-controller-manager, kubectl for the API-server tests (internal/testsupport/testenv), built from source, cached in $(MESH_CNI_CACHE)/k8s
K8S_BINS ?= etcd kube-apiserver kube-controller-manager kubectl
k8s-bins:
	@bash hack/build-k8s.sh $(K8S_BINS) >/dev/null

## istio-bins: istioctl, pilot-discovery, pilot-agent, istio-cni, install-cni and our injector driver from the module hack/istio (Istio version pinned in its go.mod), cached in $(MESH_CNI_CACHE)/istio
ISTIO_BINS ?= istioctl pilot-discovery pilot-agent istio-cni install-cni inject
istio-bins:
	@bash hack/build-istio.sh $(ISTIO_BINS) >/dev/null

## release-tools: crane, cosign, the registry and helm-docs, pinned in hack/tools/go.mod, cached in $(MESH_CNI_CACHE)/release-tools
release-tools:
	@bash hack/build-tools.sh >/dev/null

## chart-readme: charts/mesh-cni/README.md from README.md.gotmpl and values.yaml (helm-docs)
chart-readme:
	$$(bash hack/build-tools.sh helm-docs | tail -n1)/helm-docs --chart-search-root charts/mesh-cni --sort-values-order file --log-level warning

## release: binaries and image indexes for linux/amd64 and linux/arm64, SBOMs, the chart, all
## pushed to REGISTRY (default: a registry started for the run) and signed (docs/release.md)
REGISTRY ?=
release: release-tools
	REGISTRY=$(REGISTRY) VERSION=$(VERSION) bash hack/release.sh

## release-compile: compile what a release ships, for every platform, into Go's build cache (make test, before its releases)
release-compile:
	@bash hack/release.sh compile

## istio-goldens: rewrite internal/testsupport/contract/testdata/istio/*.yaml with Istio's injector (inputs in .../istio/in)
istio-goldens:
	bash hack/istio-goldens.sh

test-unit:
	$(GOTEST) ./...
	cd docs && $(GOTEST) ./...

## test-check: mesh-cnictl's checks and the docs' commands (also part of test-unit)
test-check:
	$(GOTEST) ./internal/ctl/check ./cmd/mesh-cnictl ./internal/testsupport/doctest
	cd docs && $(GOTEST) ./...

# Short fuzz runs of the parsers, as execution counts (about 4 s each on a
# quiet 2-core machine; beside make test's other lanes 2.5 times these took
# 11 min): a -fuzztime duration races Go 1.26's fuzz coordinator at the
# deadline and fails with "context deadline exceeded" and no input
# (golang/go#75804, fixed in Go 1.27). Longer runs: FUZZTIME=5m.
FUZZTIME ?=
# One fuzz worker (-parallel=1): make test runs the fuzzing beside the kind
# clusters, whose long-lived streams must not starve of CPU.
FUZZPARALLEL ?= 1
fuzz = $(GO) test -run=^$$ -fuzz=^$(1)$$ -fuzztime=$(or $(FUZZTIME),$(2)) -parallel=$(FUZZPARALLEL) $(3)
test-fuzz:
	$(call fuzz,FuzzParsePorts,120000x,./internal/mesh)
	$(call fuzz,FuzzParseCIDRs,100000x,./internal/mesh)
	$(call fuzz,FuzzDecide,48000x,./internal/mesh)
	$(call fuzz,FuzzConsulRedirect,80000x,./internal/mesh)
	$(call fuzz,FuzzAnnotationsToRules,16000x,./internal/mesh)
	$(call fuzz,FuzzChain,48000x,./internal/agent/install)
	$(call fuzz,FuzzEntry,80000x,./internal/agent/install)
	$(call fuzz,FuzzParse,100000x,./internal/config)
	$(call fuzz,FuzzNoAppIdentityExempt,8000x,./internal/testsupport/contract)
	$(call fuzz,FuzzReadResponse,40000x,./internal/lookup/podget)
	$(call fuzz,FuzzKubeconfig,20000x,./internal/lookup/apiget)

bench: bench-agent bench-backend bench-plugin bench-chart bench-podcache bench-cluster

## bench-cluster: pod start time (create → Ready, p50/p99) of meshed pods on one kind cluster (flannel) under Istio's
## own CNI, under mesh-cni and under flannel alone, in interleaved batches (the e2e spec labelled bench); writes docs/benchmarks.md
BENCH_CLUSTER ?= mesh-cni-bench
BENCH_CLUSTER_PODS ?= 100
BENCH_CLUSTER_ROUNDS ?= 4
BENCH_CLUSTER_OUT ?= $(CURDIR)/docs/benchmarks.md
bench-cluster: image-tar testproxy-tar kind-image flannel-tar
	$(E2E_ENV) E2E_INSTALL=helm E2E_CLUSTER=$(BENCH_CLUSTER) \
	  E2E_PRIMARY=flannel E2E_PRIMARY_IMAGES=$$(bash hack/build-flannel.sh | tail -n1) \
	  E2E_ISTIO_CNI_IMAGES=$$(bash hack/istio-images.sh cni | tail -n1) \
	  E2E_BENCH_PODS=$(BENCH_CLUSTER_PODS) E2E_BENCH_ROUNDS=$(BENCH_CLUSTER_ROUNDS) E2E_BENCH_OUT=$(BENCH_CLUSTER_OUT) \
	  E2E_KIND_CONFIG=$(CURDIR)/kind-configs/flannel.yaml $(GO) -C e2e test -v -tags e2e -count=1 -timeout $(E2E_TIMEOUT) \
	  . -ginkgo.v -ginkgo.no-color -ginkgo.label-filter=bench

## bench-podcache: one plugin pod lookup over the agent socket (real API server behind the cache)
bench-podcache: k8s-bins
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkLookup$$' -benchmem ./internal/agent/podcache

## bench-agent: re-chain latency over 1000 primary rewrites and steady-state RSS of the real agent binary
bench-agent: build
	MESH_CNI_AGENT_BIN=$(BIN)/mesh-cni-agent $(GO) test -count=1 -run '^$$' -bench '^BenchmarkAgent$$' -benchtime=1x ./installer

## bench-backend: Apply/Delete p50/p99 per backend and mode, next to the exec-per-rule baseline; sandbox vs nsenter; auto detection
bench-backend:
	$(GO) test -count=1 -run '^$$' -bench . -benchtime=100x ./internal/backend ./internal/backend/iptables

## bench-plugin: ADD/DEL latency through libcni after ptp, per backend, vs ptp alone, an exec-per-rule baseline and Istio's istio-cni (iptables and nftables modes), with mesh-cni's API-lookup mode; the pods live in a real kube-apiserver; writes docs/benchmarks.md
# Only what the benchmark runs: etcd and kube-apiserver, and istio-cni (not
# Istio's large control-plane binaries). Prerequisites inherit these.
bench-plugin: K8S_BINS = etcd kube-apiserver
bench-plugin: ISTIO_BINS = istio-cni
# Three runs of every shape by default: the report gives each figure's range.
BENCH_RUNS ?= 3
bench-plugin: build k8s-bins istio-bins
	$(GO) build -o $(BIN)/naive-cni ./bench/naive-cni
	$(GO) build -trimpath -ldflags "-s -w" -o $(BIN)/null-cni ./bench/null-cni
	$(GO) run ./bench/plugin -plugin $(BIN)/mesh-cni -naive $(BIN)/naive-cni -null $(BIN)/null-cni \
	  -istio-cni "$$(bash hack/build-istio.sh istio-cni | tail -n1)/istio-cni" \
	  -k8s-bins "$$(bash hack/build-k8s.sh etcd kube-apiserver | tail -n1)" -runs $(BENCH_RUNS) -out docs/benchmarks.md

clean:
	rm -rf $(BIN) _out

MESH_CNI_CACHE ?= /var/cache/mesh-cni
IMAGE ?= mesh-cni:$(VERSION)
IMAGE_TAR := $(MESH_CNI_CACHE)/images/mesh-cni-$(VERSION).tar

## image: the FROM scratch image with the static binaries (classic builder)
image: build
	@for b in mesh-cni mesh-cni-podget mesh-cni-agent mesh-cni-validator mesh-cni-metrics-proxy; do \
	  [ -x $(BIN)/$$b ] || { echo "image: bin/$$b is missing (make build)"; exit 1; }; done
	@bash hack/docker.sh
	DOCKER_BUILDKIT=0 docker build -q -t $(IMAGE) .

## image-tar: the image as a tarball for kind load image-archive
image-tar: image
	@mkdir -p $(dir $(IMAGE_TAR))
	docker save -o $(IMAGE_TAR).tmp $(IMAGE)
	mv $(IMAGE_TAR).tmp $(IMAGE_TAR)
	@echo "image-tar: $(IMAGE_TAR)"

## kustomize-base: regenerate kustomize/base and components from the chart
kustomize-base:
	cd charts && $(GO) run ./kustomize-base

## generate: regenerate the chart schema's plugin settings and docs/configuration.md from internal/config
generate:
	$(GO) generate ./internal/config

## chart-lint: helm lint --strict and ct lint, offline
chart-lint:
	@bash hack/chart-lint.sh

## chart-tools: helm (3 and 4), ct and yamllint, for the chart's tests and the e2e (hack/chart-tools.sh)
chart-tools:
	@bash hack/chart-tools.sh >/dev/null

## bench-chart: chart render (schema included) and kustomize build time
bench-chart:
	cd charts && $(GO) test -count=1 -run '^$$' -bench . -benchmem ./chart

## test-chart: chart lint, and render/kustomize/API-server tests of the chart
test-chart: chart-lint
	cd charts && $(GOTEST) ./...

## kind-image: the offline kind node image (cached in $(MESH_CNI_CACHE)/kind)
K8S_VERSION ?= $(shell bash hack/pin.sh K8S_VERSION)
KIND_NODE_IMAGE ?= mesh-cni/kind-node:$(K8S_VERSION)
export KIND_NODE_IMAGE
kind-image:
	@bash hack/kind-image.sh

## testproxy-tar: the test proxy image (FROM scratch) as a tarball for the e2e suite
PROXY_IMAGE := mesh-cni.local/testproxy:$(VERSION)
PROXY_TAR := $(MESH_CNI_CACHE)/images/testproxy-$(VERSION).tar
testproxy-tar:
	@bash hack/docker.sh
	@mkdir -p $(BIN)/testproxy-image $(dir $(PROXY_TAR))
	$(GO) build -trimpath -ldflags '-s -w' -o $(BIN)/testproxy-image/testproxy ./internal/testsupport/testproxy
	printf 'FROM scratch\nCOPY testproxy /testproxy\nENTRYPOINT ["/testproxy"]\n' > $(BIN)/testproxy-image/Dockerfile
	DOCKER_BUILDKIT=0 docker build -q -t $(PROXY_IMAGE) $(BIN)/testproxy-image >/dev/null
	docker save -o $(PROXY_TAR).tmp $(PROXY_IMAGE)
	mv $(PROXY_TAR).tmp $(PROXY_TAR)

## test-e2e: Ginkgo suites on real kind clusters (E2E_LABELS selects areas)
E2E_LABELS ?=
E2E_TIMEOUT ?= 60m
E2E_ENV = E2E_IMAGES="$(IMAGE_TAR) $(PROXY_TAR)" E2E_NODE_IMAGE=$(KIND_NODE_IMAGE) \
	HELM=$$(bash hack/chart-tools.sh helm | tail -n1)/helm CT=$$(bash hack/chart-tools.sh ct | tail -n1)/ct \
	KUBECTL=$$(bash hack/build-k8s.sh kubectl | tail -n1)/kubectl
# Every label but istio-real (test-e2e-istio) unless E2E_LABELS says otherwise.
E2E_GO_TEST = $(GO) -C e2e test -v -tags e2e -count=1 -timeout $(E2E_TIMEOUT) . -ginkgo.v -ginkgo.no-color -ginkgo.label-filter='$(or $(E2E_LABELS),!istio-real)'
# The other cluster shapes run the smoke specs unless E2E_LABELS says otherwise.
E2E_GO_SMOKE = $(GO) -C e2e test -v -tags e2e -count=1 -timeout $(E2E_TIMEOUT) . -ginkgo.v -ginkgo.no-color -ginkgo.label-filter='$(or $(E2E_LABELS),smoke)'
test-e2e: image-tar testproxy-tar kind-image
	$(E2E_ENV) E2E_INSTALL=helm E2E_CLUSTER=mesh-cni-e2e-helm-$$$$ \
	  E2E_KIND_CONFIG=$(CURDIR)/kind-configs/multi-node.yaml $(E2E_GO_TEST)
	$(E2E_ENV) E2E_INSTALL=kustomize E2E_CLUSTER=mesh-cni-e2e-kustomize-$$$$ \
	  E2E_KIND_CONFIG=$(CURDIR)/kind-configs/single-node.yaml $(E2E_GO_SMOKE)
	$(E2E_ENV) E2E_INSTALL=helm E2E_CLUSTER=mesh-cni-e2e-dual-$$$$ \
	  E2E_KIND_CONFIG=$(CURDIR)/kind-configs/dual-stack.yaml $(E2E_GO_SMOKE)

## test-e2e-ci: the e2e run of `make test`, with mesh-cni from a real OCI registry
## (hack/e2e-registry.sh: `make release` into a local registry, nodes pull by digest,
## no `kind load` of mesh-cni): every spec, Istio's real control plane included, on
## the 3-node flannel cluster (Helm from oci://); the smoke, STATUS and refuse specs
## on one node whose primary (meshnet) writes a cniVersion 1.1.0 list (kustomize, by digest).
test-e2e-ci: testproxy-tar kind-image flannel-tar istio-images release-tools
	bash hack/e2e-registry.sh $(MAKE) --no-print-directory e2e-ci-clusters

# The two clusters of test-e2e-ci; E2E_RELEASE names the release in the registry.
e2e-ci-clusters:
	$(E2E_ENV) E2E_IMAGES="$(PROXY_TAR)" E2E_INSTALL=helm E2E_CLUSTER=mesh-cni-e2e-flannel-$$$$ \
	  E2E_PRIMARY=flannel E2E_PRIMARY_IMAGES=$$(bash hack/build-flannel.sh | tail -n1) \
	  E2E_ISTIO_IMAGES=$$(bash hack/istio-images.sh | tail -n1) \
	  E2E_ISTIO_CNI_IMAGES=$$(bash hack/istio-images.sh cni | tail -n1) \
	  ISTIOCTL=$$(bash hack/build-istio.sh istioctl | tail -n1)/istioctl \
	  E2E_KIND_CONFIG=$(CURDIR)/kind-configs/flannel.yaml $(GO) -C e2e test -v -tags e2e -count=1 -timeout $(E2E_TIMEOUT) \
	  . -ginkgo.v -ginkgo.no-color -ginkgo.label-filter='$(E2E_LABELS)'
	$(E2E_ENV) E2E_IMAGES="$(PROXY_TAR)" E2E_INSTALL=kustomize E2E_CLUSTER=mesh-cni-e2e-kustomize-$$$$ \
	  E2E_KIND_CONFIG=$(CURDIR)/kind-configs/status.yaml $(GO) -C e2e test -v -tags e2e -count=1 -timeout $(E2E_TIMEOUT) \
	  . -ginkgo.v -ginkgo.no-color -ginkgo.label-filter='$(or $(E2E_LABELS),smoke || status || refuse)'

## test-e2e-more: the IPv6-only, GKE-path and rewriting-primary clusters (smoke specs)
test-e2e-more: image-tar testproxy-tar kind-image
	$(E2E_ENV) E2E_CLUSTER=mesh-cni-e2e-ipv6-$$$$ \
	  E2E_KIND_CONFIG=$(CURDIR)/kind-configs/ipv6.yaml $(E2E_GO_SMOKE)
	$(E2E_ENV) E2E_CLUSTER=mesh-cni-e2e-gke-$$$$ E2E_HELM_SET=platform=gke \
	  E2E_KIND_CONFIG=$(CURDIR)/kind-configs/gke-like.yaml $(E2E_GO_SMOKE)
	$(E2E_ENV) E2E_CLUSTER=mesh-cni-e2e-rewriting-$$$$ \
	  E2E_KIND_CONFIG=$(CURDIR)/kind-configs/rewriting-primary.yaml $(E2E_GO_SMOKE)

## istio-images: istiod and the proxyv2 stand-in (Istio's pilot-agent, the test proxy in place of Envoy) as one tarball; Istio's install-cni as another
istio-images:
	@bash hack/istio-images.sh >/dev/null
	@bash hack/istio-images.sh cni >/dev/null

## test-istio-install-cni: Istio's own install-cni (its image, run by docker) and mesh-cni's installer on one conf dir: migrateFrom, then handBackTo
test-istio-install-cni:
	@bash hack/docker.sh
	tar=$$(bash hack/istio-images.sh cni | tail -n1) && docker load -q -i $$tar >/dev/null && \
	  MESH_CNI_ISTIO_CNI_IMAGE=mesh-cni.local/istio/install-cni:$$(basename $$tar .tar | sed 's/^istio-cni-//') \
	  $(GO) test -count=1 -v ./internal/agent/install -run TestWithIstiosOwnInstallCNI

## test-e2e-istio: Istio's real control plane and injector with mesh-cni as the CNI (label istio-real, Helm, one node)
E2E_ISTIO_CLUSTER ?= mesh-cni-e2e-istio-$$$$
E2E_ISTIO_KIND_CONFIG ?= $(CURDIR)/kind-configs/single-node.yaml
test-e2e-istio: image-tar testproxy-tar kind-image
	$(E2E_ENV) E2E_ISTIO_IMAGES=$$(bash hack/istio-images.sh | tail -n1) \
	  ISTIOCTL=$$(bash hack/build-istio.sh istioctl | tail -n1)/istioctl \
	  E2E_INSTALL=helm E2E_CLUSTER=$(E2E_ISTIO_CLUSTER) E2E_KIND_CONFIG=$(E2E_ISTIO_KIND_CONFIG) \
	  $(GO) -C e2e test -v -tags e2e -count=1 -timeout $(E2E_TIMEOUT) . -ginkgo.v -ginkgo.no-color \
	  -ginkgo.label-filter='$(or $(E2E_LABELS),istio-real)'


## flannel-tar: flannel's images (flanneld and its CNI plugin, built from source) as a tarball, cached in $(MESH_CNI_CACHE)/flannel
flannel-tar:
	@bash hack/build-flannel.sh >/dev/null

## test-e2e-flannel: every spec (Helm) on kind-configs/flannel.yaml, flannel installed first as the primary CNI
E2E_FLANNEL_CLUSTER ?= mesh-cni-e2e-flannel-$$$$
test-e2e-flannel: image-tar testproxy-tar kind-image flannel-tar
	$(E2E_ENV) E2E_INSTALL=helm E2E_CLUSTER=$(E2E_FLANNEL_CLUSTER) \
	  E2E_PRIMARY=flannel E2E_PRIMARY_IMAGES=$$(bash hack/build-flannel.sh | tail -n1) \
	  E2E_KIND_CONFIG=$(CURDIR)/kind-configs/flannel.yaml $(E2E_GO_TEST)

## cilium-tar: Cilium's images (agent with clang-19 and the BPF sources, operator; built from source) as a tarball, cached in $(MESH_CNI_CACHE)/cilium-<key>
cilium-tar:
	@bash hack/build-cilium.sh >/dev/null

## test-e2e-cilium: the cilium and smoke specs (Helm) on kind-configs/cilium.yaml, Cilium installed first as the primary
## with hack/cilium/kind-values.yaml; E2E_CILIUM_SET adds --set values to Cilium's install. The cilium spec runs
## cni.exclusive=false, then true, and puts the installed setting back. make test runs the cilium spec alone.
E2E_CILIUM_CLUSTER ?= mesh-cni-e2e-cilium-$$$$
E2E_CILIUM_SET ?=
test-e2e-cilium: image-tar testproxy-tar kind-image cilium-tar
	@$(MAKE) --no-print-directory e2e-cilium-cluster

# The cluster of test-e2e-cilium, its images already built (make test's cilium lane).
e2e-cilium-cluster:
	$(E2E_ENV) E2E_INSTALL=helm E2E_CLUSTER=$(E2E_CILIUM_CLUSTER) \
	  E2E_PRIMARY=cilium E2E_PRIMARY_IMAGES=$$(bash hack/build-cilium.sh | tail -n1) E2E_PRIMARY_SET='$(E2E_CILIUM_SET)' \
	  E2E_KIND_CONFIG=$(CURDIR)/kind-configs/cilium.yaml $(GO) -C e2e test -v -tags e2e -count=1 -timeout $(E2E_TIMEOUT) \
	  . -ginkgo.v -ginkgo.no-color -ginkgo.label-filter='$(or $(E2E_LABELS),cilium || smoke)'

.PHONY: test-istio-install-cni kind-image testproxy-tar flannel-tar cilium-tar test-e2e test-e2e-ci e2e-ci-clusters test-e2e-more test-e2e-flannel test-e2e-cilium e2e-cilium-cluster test-e2e-istio istio-images demo demo-down

## demo: a kind cluster with flannel as the primary CNI, mesh-cni (Helm) chained after it and a
## meshed app, with the proxy's evidence; DEMO_PRIMARY=default uses kind's own CNI (meshnet) instead
DEMO_PRIMARY ?= flannel
demo: image-tar testproxy-tar kind-image
	MESH_TAR=$(IMAGE_TAR) PROXY_TAR=$(PROXY_TAR) DEMO_PRIMARY=$(DEMO_PRIMARY) bash hack/demo.sh up

## demo-down: delete the demo cluster
demo-down:
	bash hack/demo.sh down
