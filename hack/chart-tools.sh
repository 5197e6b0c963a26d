#!/usr/bin/env bash
# Builds the chart tools from the Go module proxy into the shared cache, only
# when missing: helm v3 (lint, ct), helm v4 (render parity), ct (chart-testing).
# yamllint (ct's YAML check) comes from Debian. Prints the tools dir.
set -euo pipefail
HELM3_VERSION=${HELM3_VERSION:-v3.22.0}
HELM4_VERSION=${HELM4_VERSION:-v4.3.1}
CT_VERSION=${CT_VERSION:-v3.14.0}
CACHE=${MESH_CNI_CACHE:-/var/cache/mesh-cni}
TOOLS=$CACHE/tools
mkdir -p "$TOOLS"

build() { # name module@version [ldflags]
  local name=$1 pkg=$2 ldflags=${3:-} dir
  dir=$TOOLS/${name}-${pkg##*@}
  if [ ! -x "$dir/$(basename "${pkg%@*}")" ]; then
    echo "building $pkg" >&2
    (cd "$TOOLS" && GOFLAGS=-mod=mod CGO_ENABLED=0 GOBIN="$dir" nice go install -trimpath -ldflags "-s -w $ldflags" "$pkg" >&2)
  fi
  ln -sfn "$dir/$(basename "${pkg%@*}")" "$TOOLS/$name"
}

# Helm 3 takes its default Kubernetes version (helm lint, helm template
# without --kube-version) from link flags; without them it assumes 1.20.
h3=helm.sh/helm/v3
build helm3 "$h3/cmd/helm@$HELM3_VERSION" "-X $h3/internal/version.version=$HELM3_VERSION \
  -X $h3/pkg/chartutil.k8sVersionMajor=1 -X $h3/pkg/chartutil.k8sVersionMinor=34 \
  -X $h3/pkg/lint/rules.k8sVersionMajor=1 -X $h3/pkg/lint/rules.k8sVersionMinor=34"
build helm4 "helm.sh/helm/v4/cmd/helm@$HELM4_VERSION"
build ct "github.com/helm/chart-testing/v3/ct@$CT_VERSION"

if ! command -v yamllint >/dev/null 2>&1; then
  echo "installing yamllint" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends yamllint >/dev/null
fi
echo "$TOOLS"
