#!/usr/bin/env bash
# Writes Istio's injected pods for the application pods in
# internal/testsupport/contract/testdata/istio/in into a directory (default: the goldens next
# to them), with Istio's own injector and the injector config that
# `istioctl manifest generate` renders with CNI mode on.
#
#   hack/istio-goldens.sh [outdir]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
data="$here/../internal/testsupport/contract/testdata/istio"
out=${1:-$data}
bin=$("$here/build-istio.sh" istioctl inject | tail -n1)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# components.cni.enabled is what sets values.pilot.cni.enabled in this version
# (operator/pkg/render/manifest.go translateIstioOperatorToHelm); a --set of
# the value alone is overwritten.
cni=(--set components.cni.enabled=true)
"$bin/istioctl" manifest generate "${cni[@]}" >"$tmp/default.yaml"
"$bin/inject" -manifest "$tmp/default.yaml" -o "$out" "$data"/in/*.yaml
# A mesh-wide setting needs its own mesh config.
"$bin/istioctl" manifest generate "${cni[@]}" \
  --set meshConfig.defaultConfig.proxyMetadata.ISTIO_META_DNS_CAPTURE=true >"$tmp/mesh-dns.yaml"
"$bin/inject" -manifest "$tmp/mesh-dns.yaml" -o "$out" "$data"/in/mesh-dns/*.yaml
