#!/usr/bin/env bash
# Builds the chart tools from the Go module proxy into the shared cache, only
# when missing, and prints the dir to put first on PATH:
#   helm  (Helm 3: helm lint, and the helm ct calls)
#   helm4 (Helm 4: render parity)
#   ct    (chart-testing)
# yamllint (used by ct) comes from Debian. `chart-tools.sh helm4` builds one.
set -euo pipefail
. "$(dirname "$0")/pin.sh"
HELM3_VERSION=$(pin HELM3_VERSION)
HELM4_VERSION=$(pin HELM4_VERSION)
CT_VERSION=$(pin CT_VERSION)
CACHE=${MESH_CNI_CACHE:-/var/cache/mesh-cni}
TOOLS=$CACHE/tools
mkdir -p "$TOOLS/bin"
# One build at a time (tests and make may call this together).
exec 9>"$TOOLS/.lock"
flock 9

# The build dir is global: the exit trap runs after build() has returned, when
# a local would be gone (and unbound under set -u, failing the script).
work=
trap 'rm -rf "${work:-}"' EXIT

build() { # link-name module version package [ldflags]
  local name=$1 mod=$2 ver=$3 pkg=$4 ldflags=${5:-} dir exe
  dir=$TOOLS/$name-$ver
  exe=$dir/$(basename "$pkg")
  if [ ! -x "$exe" ]; then
    echo "chart-tools: building $pkg@$ver" >&2
    # A throwaway module requiring exactly the tool's version, so the tool's
    # own go.mod decides its dependencies (as go install would, but without
    # the module-list lookup that some proxies refuse).
    work=$(mktemp -d "$TOOLS/.build-XXXXXX")
    printf 'module chartbuild\n\ngo 1.24\n\nrequire %s %s\n' "$mod" "$ver" >"$work/go.mod"
    (cd "$work" && GOFLAGS=-mod=mod CGO_ENABLED=0 nice go build -trimpath -ldflags "-s -w $ldflags" \
      -o "$work/out/$(basename "$pkg")" "$pkg" >&2)
    rm -rf "$dir" && mv "$work/out" "$dir" && rm -rf "$work"
    work=
  fi
  ln -sfn "$exe" "$TOOLS/bin/$name"
}

want=${*:-helm helm4 ct yamllint}
for t in $want; do
  case $t in
  helm)
    # Helm 3 takes its default Kubernetes version (helm lint, helm template
    # without --kube-version) from link flags; without them it assumes 1.20.
    h3=helm.sh/helm/v3
    build helm $h3 "$HELM3_VERSION" $h3/cmd/helm "-X $h3/internal/version.version=$HELM3_VERSION \
      -X $h3/pkg/chartutil.k8sVersionMajor=1 -X $h3/pkg/chartutil.k8sVersionMinor=34 \
      -X $h3/pkg/lint/rules.k8sVersionMajor=1 -X $h3/pkg/lint/rules.k8sVersionMinor=34" ;;
  helm4) build helm4 helm.sh/helm/v4 "$HELM4_VERSION" helm.sh/helm/v4/cmd/helm "-X helm.sh/helm/v4/internal/version.version=$HELM4_VERSION" ;;
  ct)
    build ct github.com/helm/chart-testing/v3 "$CT_VERSION" github.com/helm/chart-testing/v3/ct \
      "-X github.com/helm/chart-testing/v3/ct/cmd.Version=$CT_VERSION"
    # ct's default lint rules and Chart.yaml schema ship in its module.
    (cd "$TOOLS" && GOFLAGS= go mod download -json "github.com/helm/chart-testing/v3@$CT_VERSION" >/dev/null)
    ln -sfn "$(go env GOMODCACHE)/github.com/helm/chart-testing/v3@$CT_VERSION/etc" "$TOOLS/ct-etc" ;;
  yamllint)
    if ! command -v yamllint >/dev/null 2>&1; then
      echo "chart-tools: installing yamllint" >&2
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq >&2
      apt-get install -y -qq --no-install-recommends yamllint >/dev/null
    fi ;;
  *) echo "chart-tools: unknown tool $t" >&2; exit 2 ;;
  esac
done
echo "$TOOLS/bin"
