SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
GO ?= go
export GOFLAGS := -buildvcs=false
export CGO_ENABLED := 0
VERSION ?= $(shell cat VERSION)
LDFLAGS := -s -w -X github.com/mesh-cni/mesh-cni/pkg/version.Version=$(VERSION)
BIN := $(CURDIR)/bin
# Test packages in parallel, but not more than the cores we have.
GOTEST := $(GO) test -count=1 -p 2

.PHONY: all build deps k8s-bins test test-unit test-fuzz bench bench-agent clean

all: build

deps:
	@bash hack/deps.sh

## build: static binaries into bin/
build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/mesh-cni ./plugin
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/mesh-cnictl ./ctl
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/mesh-cni-agent ./installer
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/mesh-cni-validator ./validator

## test: every test (the README's test command)
test: deps build k8s-bins test-unit test-fuzz

## k8s-bins: etcd, kube-apiserver, kube-controller-manager, kubectl for the API-server tests (pkg/testenv), built from source, cached in $(MESH_CNI_CACHE)/k8s
K8S_BINS ?= etcd kube-apiserver kube-controller-manager kubectl
k8s-bins:
	@bash hack/build-k8s.sh $(K8S_BINS) >/dev/null

test-unit:
	$(GOTEST) ./...

# Short fuzz runs of the parsers; longer with FUZZTIME=5m.
FUZZTIME ?= 10s
test-fuzz:
	$(GO) test -run=^$$ -fuzz=^FuzzParsePorts$$ -fuzztime=$(FUZZTIME) ./pkg/mesh
	$(GO) test -run=^$$ -fuzz=^FuzzParseCIDRs$$ -fuzztime=$(FUZZTIME) ./pkg/mesh
	$(GO) test -run=^$$ -fuzz=^FuzzDecide$$ -fuzztime=$(FUZZTIME) ./pkg/mesh

bench: bench-agent

## bench-agent: re-chain latency over 1000 primary rewrites and steady-state RSS of the real agent binary
bench-agent: build
	MESH_CNI_AGENT_BIN=$(BIN)/mesh-cni-agent $(GO) test -count=1 -run '^$$' -bench '^BenchmarkAgent$$' -benchtime=1x ./installer

clean:
	rm -rf $(BIN) _out
